// krmcheck reads a KRM function's output ResourceList on stdin with the kpt SDK's own
// parser (github.com/kptdev/krm-functions-sdk/go/fn) and prints what it understood as JSON:
// each item's apiVersion, kind, namespace and name, and each result's severity, message,
// resourceRef, field path and file. A parse error exits 1 with the SDK's message.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/kptdev/krm-functions-sdk/go/fn"
)

type item struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace,omitempty"`
	Name       string `json:"name"`
}

type result struct {
	Severity string `json:"severity"`
	Message  string `json:"message"`
	Ref      *item  `json:"resourceRef,omitempty"`
	Field    string `json:"field,omitempty"`
	File     string `json:"file,omitempty"`
	Index    int    `json:"index,omitempty"`
}

type summary struct {
	Items   []item   `json:"items"`
	Results []result `json:"results"`
}

func main() {
	input, err := io.ReadAll(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "krmcheck:", err)
		os.Exit(2)
	}
	rl, err := fn.ParseResourceList(input)
	if err != nil {
		fmt.Fprintln(os.Stderr, "krmcheck: not a ResourceList:", err)
		os.Exit(1)
	}
	out := summary{Items: []item{}, Results: []result{}}
	for _, o := range rl.Items {
		out.Items = append(out.Items, item{o.GetAPIVersion(), o.GetKind(), o.GetNamespace(), o.GetName()})
	}
	for _, r := range rl.Results {
		entry := result{Severity: string(r.Severity), Message: r.Message}
		if r.ResourceRef != nil {
			entry.Ref = &item{r.ResourceRef.APIVersion, r.ResourceRef.Kind, r.ResourceRef.Namespace, r.ResourceRef.Name}
		}
		if r.Field != nil {
			entry.Field = r.Field.Path
		}
		if r.File != nil {
			entry.File, entry.Index = r.File.Path, r.File.Index
		}
		out.Results = append(out.Results, entry)
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fmt.Fprintln(os.Stderr, "krmcheck:", err)
		os.Exit(2)
	}
}
