// Package trafficmap draws an explain report as a flow diagram: for each
// upstream, priority → locality → endpoint, band widths proportional to
// traffic, with spill, panic and drops highlighted. It renders HTML with
// inline SVG from embedded templates, deterministically, so the admin port
// can serve it without a front-end toolchain and a test can compare bytes.
package trafficmap
