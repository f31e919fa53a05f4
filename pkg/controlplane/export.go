package controlplane

import (
	"fmt"
	"strings"

	"poise.dev/poise/pkg/convert"
	"poise.dev/poise/pkg/topology"
)

// DefaultExport reads the visibility of the objects that set no
// spec.exportTo as serve's --default-export-to takes it: a list
// spec.exportTo accepts (convert.ExportTo), "." standing for each object's
// own namespace; nil is not set (every namespace). Each problem names the
// flag and what it was given; explain reads its flag of the same name with
// it, so both resolve a rule alike.
func DefaultExport(items []string) (topology.Export, []error) {
	export, problems := convert.ExportTo(nil, items, "")
	var errs []error
	for _, p := range problems {
		errs = append(errs, fmt.Errorf("--default-export-to %q: %s", strings.Join(items, ","), p.ErrorBody()))
	}
	return export, errs
}
