// Package xdsname names the xDS clusters Poise publishes and the sub_zone of
// a per-endpoint locality. The translator that renders them and the load
// reports that read them back both take the names from here, so reading a
// load report needs nothing of the translator.
package xdsname
