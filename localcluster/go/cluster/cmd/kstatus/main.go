// kstatus: the health that Flux, kpt and cli-utils compute for Kubernetes objects, by the real
// library (sigs.k8s.io/cli-utils/pkg/kstatus/status). Reads a JSON object or a List (`kubectl get
// -o json`) on stdin; prints one line per object: kind, namespace/name, status, message.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

func main() {
	data, err := io.ReadAll(os.Stdin)
	if err != nil {
		fail(err)
	}
	// The apimachinery JSON decoder: integers stay int64, as kstatus reads them.
	var probe struct {
		Items json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(data, &probe); err != nil {
		fail(err)
	}
	var list unstructured.UnstructuredList
	if probe.Items != nil {
		if err := list.UnmarshalJSON(data); err != nil {
			fail(err)
		}
	} else {
		var object unstructured.Unstructured
		if err := object.UnmarshalJSON(data); err != nil {
			fail(err)
		}
		list.Items = []unstructured.Unstructured{object}
	}
	items := list.Items
	for i := range items {
		result, err := status.Compute(&items[i])
		if err != nil {
			fail(err)
		}
		fmt.Printf("%s\t%s/%s\t%s\t%s\n", items[i].GetKind(), items[i].GetNamespace(), items[i].GetName(), result.Status, result.Message)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "kstatus:", err)
	os.Exit(1)
}
