// Package shares carries each replica's compact aggregate of its own
// clients' load reports to the leader: one ConfigMap per replica, written
// by that replica and read by the leader when it decides outliers.
package shares
