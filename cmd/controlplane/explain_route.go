package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"poise.dev/poise/pkg/explain"
	"poise.dev/poise/pkg/partitionmap"
)

func newExplainRouteCmd(stdout, stderr io.Writer) *cobra.Command {
	var o routeOptions
	c := &cobra.Command{
		Use:     "explain-route -f PATH... --domain D --product P",
		Short:   "Show how a spatial request is routed: residency, health, locality, result",
		Example: "  controlplane explain-route -f examples/spatial --domain cadastre \\\n      --product parcels --bbox 8,48,9,49",
		Args:    noArgs,
	}
	fs := c.Flags()
	fileFlag(fs, &o.files, "manifest file or directory (repeatable, or comma-separated)")
	fs.StringVar(&o.domain, "domain", "", "the spatial domain, as x-spatial-domain names it (NAME), or NAMESPACE/NAME")
	fs.StringVar(&o.product, "product", "", "the product, as its route names it")
	fs.StringVar(&o.bbox, "bbox", "", "the x-spatial-bbox header value")
	fs.StringVar(&o.crs, "crs", "", "the x-spatial-crs header value (default CRS84)")
	fs.StringVar(&o.path, "path", "", "the request path with its query, e.g. '/collections/parcels/items?bbox=...'")
	fs.StringVar(&o.requestID, "request-id", "", "the x-request-id header value (for a share cap)")
	fs.StringVarP(&o.output, "output", "o", "text", "output format: text or json")
	return command(c, func(*cobra.Command, []string) int { return runExplainRoute(o, stdout, stderr) })
}

type routeOptions struct {
	files                                               paths
	domain, product, bbox, crs, path, requestID, output string
}

func runExplainRoute(o routeOptions, stdout, stderr io.Writer) int {
	files, domain, product, bbox, crs, path, requestID, output := o.files, &o.domain, &o.product, &o.bbox, &o.crs, &o.path, &o.requestID, &o.output
	if !checkOutput(*output, stderr) {
		return exitUsage
	}
	if *domain == "" || *product == "" {
		fmt.Fprintln(stderr, "error: --domain and --product are required")
		return exitUsage
	}
	if !requireFiles(files, stderr) {
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
