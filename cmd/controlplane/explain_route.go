package main

import (
	"fmt"
	"io"
	"strings"

	"poise.dev/poise/pkg/explain"
	"poise.dev/poise/pkg/partitionmap"
	"poise.dev/poise/pkg/topology"
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
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "error: unexpected argument %q (manifests are given with -f)\n", fs.Arg(0))
		return exitUsage
	}
	if *output != "text" && *output != "json" {
		fmt.Fprintf(stderr, "error: -o %q: want text or json\n", *output)
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
	st, err := findDomain(snap, *domain)
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

// findDomain resolves NAMESPACE/NAME, or NAME the way Envoy matches x-spatial-domain:
// the serving domain of that name.
func findDomain(snap *topology.Snapshot, name string) (*topology.SpatialState, error) {
	if strings.Contains(name, "/") {
		k, err := topology.ParseKey(name)
		if err != nil {
			return nil, err
		}
		if st := snap.SpatialDomain(k); st != nil {
			return st, nil
		}
		return nil, fmt.Errorf("no such SpatialDomain in the manifests")
	}
	var found []string
	for _, st := range snap.Spatial() {
		if st.Domain.Key.Name == name {
			if st.Serving() {
				return st, nil
			}
			found = append(found, st.Domain.Key.String())
		}
	}
	if len(found) > 0 {
		return nil, fmt.Errorf("SpatialDomain %s is not serving", strings.Join(found, ", "))
	}
	return nil, fmt.Errorf("no SpatialDomain of that name in the manifests")
}
