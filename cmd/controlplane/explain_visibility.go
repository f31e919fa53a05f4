package main

import (
	"fmt"
	"io"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/validation"

	"poise.dev/poise/pkg/controlplane"
	"poise.dev/poise/pkg/explain"
)

// visibilityOptions are explain's flags of who may read what: the default
// rule as serve takes it, and the client readability is judged for. The
// client is --client-namespace rather than --as (kubectl's --as
// impersonates a user towards the apiserver, which explain's
// --source=kubernetes reads) or --namespace (explain's, the namespace it
// reads).
type visibilityOptions struct {
	defaultExportTo []string
	clientNamespace string
	anonymous       bool
}

func visibilityFlags(fs *pflag.FlagSet, o *visibilityOptions) {
	fs.StringSliceVar(&o.defaultExportTo, "default-export-to", nil,
		`resolve visibility as serve --default-export-to does: who may read an object that sets no spec.exportTo, "*" (the default), "." or namespace names, comma-separated`)
	fs.StringVar(&o.clientNamespace, "client-namespace", "",
		"say, for each upstream and SpatialDomain, whether an xDS client whose identity proves this namespace may read it, and why")
	fs.BoolVar(&o.anonymous, "client-anonymous", false,
		`the same for an anonymous client (no proven namespace), which reads only what is exported to "*"`)
}

// read checks the flags; nil options when none was given, so the report
// is the one without visibility resolved.
func (o visibilityOptions) read(fs *pflag.FlagSet, stderr io.Writer) (*explain.VisibilityOptions, bool) {
	given := fs.Changed("default-export-to") || fs.Changed("client-namespace") || fs.Changed("client-anonymous")
	if !given {
		return nil, true
	}
	var out explain.VisibilityOptions
	if fs.Changed("default-export-to") {
		def, problems := controlplane.DefaultExport(o.defaultExportTo)
		for _, p := range problems {
			fmt.Fprintf(stderr, "error: %v\n", p)
		}
		if len(problems) > 0 {
			return nil, false
		}
		out.Default = def
	}
	switch {
	case fs.Changed("client-namespace") && o.anonymous:
		fmt.Fprintln(stderr, "error: --client-namespace and --client-anonymous: give one client, of a namespace or anonymous")
		return nil, false
	case fs.Changed("client-namespace") && o.clientNamespace == "":
		fmt.Fprintln(stderr, `error: --client-namespace "": want a namespace name; for a client of no proven namespace use --client-anonymous`)
		return nil, false
	case fs.Changed("client-namespace"):
		if errs := validation.IsDNS1123Label(o.clientNamespace); len(errs) > 0 {
			fmt.Fprintf(stderr, "error: --client-namespace %q: not a namespace name: %s\n", o.clientNamespace, errs[0])
			return nil, false
		}
		out.Audience = &explain.Audience{Namespace: o.clientNamespace}
	case o.anonymous:
		out.Audience = &explain.Audience{Anonymous: true}
	}
	return &out, true
}
