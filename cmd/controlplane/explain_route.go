package main

import (
	"fmt"
	"io"

	"poise.dev/poise/pkg/explain"
	"poise.dev/poise/pkg/partitionmap"
)

func runExplainRoute(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("explain-route", stderr)
	var files paths
	fs.Var(&files, "f", "manifest file or directory (repeatable)")
	domain := fs.String("domain", "", "the spatial domain, as x-spatial-domain names it (NAME), or NAMESPACE/NAME")
	product := fs.String("product", "", "the product, as its route names it")
	bbox := fs.String("bbox", "", "the x-spatial-bbox header value")
	crs := fs.String("crs", "", "the x-spatial-crs header value (default CRS84)")
	path := fs.String("path", "", "the request path with its query, e.g. '/collections/parcels/items?bbox=...'")
	requestID := fs.String("request-id", "", "the x-request-id header value (for a share cap)")
	output := fs.String("o", "text", "output format: text or json")
	if !parseReportFlags(fs, args, output, stderr) {
		return exitUsage
	}
	if *domain == "" || *product == "" {
		fmt.Fprintln(stderr, "error: --domain and --product are required")
		return exitUsage
	}
	snap, _, ok := load(files, stderr)
	if !ok {
		return exitInvalid
	}
	st, err := explain.FindDomain(snap, *domain)
	if err != nil {
		fmt.Fprintf(stderr, "error: --domain %s: %v\n", *domain, err)
		return exitInvalid
	}
	rep, err := explain.ExplainRoute(st, partitionmap.Request{Product: *product, BBox: *bbox, CRS: *crs, Path: *path, RequestID: *requestID})
	if err != nil {
		fmt.Fprintf(stderr, "error: %v\n", err)
		return exitInvalid
	}
	return writeReport(*output, stdout, stderr, rep, func() error { return explain.WriteRouteText(stdout, rep) })
}
