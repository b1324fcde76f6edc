// exports-go: a Go decorator that uses every export and every manifest
// field of the contract, so that its fixtures check each piece of the Go
// SDK's hand-written glue (plugins/sdk-go/abi.go) through the real runtime:
// manifest options (namespaces, finalizer, resync, metadata-only), a parent
// patch with a requeue, finalize, references (by name and by labels),
// validate (warnings and causes) and mutate.
package main

import (
	"encoding/json"

	kubeplug "kubeplug/sdk"
)

type Config struct {
	Team string `json:"team"`
}

type Exports struct{}

var example = kubeplug.Namespaced("example.com", "v1alpha1", "Example", "examples")

const finalizer = "exports.kubeplug.io/hold"

type view struct {
	Metadata kubeplug.Meta `json:"metadata"`
	Spec     struct {
		ConfigRef string `json:"configRef"`
		App       string `json:"app"`
		Hold      bool   `json:"hold"`
	} `json:"spec"`
}

func (Exports) Manifest(config *Config) (*kubeplug.Manifest, error) {
	if config.Team == "" {
		return nil, kubeplug.InvalidConfig("team is required")
	}
	resync := uint32(600)
	hold := finalizer
	return &kubeplug.Manifest{
		Name:          "exports",
		Version:       "0.3.0",
		Parent:        example,
		Mode:          kubeplug.Decorator,
		Children:      []kubeplug.Resource{kubeplug.ConfigMap},
		Related:       []kubeplug.Related{{Resource: kubeplug.Pod, MatchLabels: []kubeplug.LabelMatch{{Key: "app", Value: kubeplug.ParentName()}}}},
		Namespaces:    []string{"team-" + config.Team},
		Finalizer:     &hold,
		ResyncSeconds: &resync,
		MetadataOnly:  []kubeplug.Resource{kubeplug.Pod},
		Webhooks:      []kubeplug.Webhook{kubeplug.Validate, kubeplug.Mutate},
		References:    []kubeplug.Resource{kubeplug.ConfigMap, kubeplug.Secret},
	}, nil
}

func (Exports) References(parent json.RawMessage, _ *Config) ([]kubeplug.Reference, error) {
	var v view
	if err := json.Unmarshal(parent, &v); err != nil {
		return nil, kubeplug.InvalidInput("parent: %s", err)
	}
	var refs []kubeplug.Reference
	if v.Spec.ConfigRef != "" {
		refs = append(refs, kubeplug.Named(kubeplug.ConfigMap, v.Spec.ConfigRef))
	}
	if v.Spec.App != "" {
		refs = append(refs, kubeplug.Labelled(kubeplug.Secret, [2]string{"app", v.Spec.App}))
	}
	return refs, nil
}

func (Exports) Reconcile(ctx *kubeplug.Context[Config]) (*kubeplug.Response, error) {
	var v view
	if err := ctx.ParentAs(&v); err != nil {
		return nil, err
	}
	found := 0
	if _, ok := ctx.RelatedNamed("v1", "ConfigMap", v.Spec.ConfigRef); ok {
		found++
	}
	secrets := len(ctx.RelatedOf("v1", "Secret"))
	r := (&kubeplug.Response{}).
		Label("example.com/team", ctx.Config.Team).
		Annotation("example.com/found", fmtInt(found+secrets)).
		RequeueAfter(30).
		Event(kubeplug.Warning("Decorated", "decorated by "+ctx.Config.Team))
	return r.Child(map[string]any{
		"apiVersion": "v1",
		"kind":       "ConfigMap",
		"metadata":   map[string]any{"name": ctx.Name() + "-attached", "namespace": ctx.Namespace()},
		"data":       map[string]string{"entropy": fmtInt(int(ctx.Entropy[31]))},
	}), nil
}

func fmtInt(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

func (Exports) Finalize(ctx *kubeplug.Context[Config]) (*kubeplug.FinalizeResponse, error) {
	var v view
	if err := ctx.ParentAs(&v); err != nil {
		return nil, err
	}
	if v.Spec.Hold {
		f := kubeplug.Pending(15)
		f.Events = append(f.Events, kubeplug.Normal("Holding", "spec.hold is set"))
		return f, nil
	}
	return kubeplug.Done(), nil
}

func (Exports) Validate(request *kubeplug.AdmissionRequest[Config]) (*kubeplug.Verdict, error) {
	var v view
	if err := json.Unmarshal(request.Object, &v); err != nil {
		return kubeplug.Allow().Warn("no object: " + request.Username), nil
	}
	if v.Spec.App == "forbidden" {
		return &kubeplug.Verdict{Denied: true, Message: "two problems", Causes: []kubeplug.Cause{
			{Field: "spec.app", Message: "is forbidden"},
			{Field: "metadata.name", Message: "was asked by " + request.Username},
		}}, nil
	}
	return kubeplug.Allow().Warn("checked by " + request.Config.Team).Warn("dry run: " + fmtBool(request.DryRun)), nil
}

func fmtBool(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func (Exports) Mutate(request *kubeplug.AdmissionRequest[Config]) (json.RawMessage, error) {
	var object map[string]any
	if err := json.Unmarshal(request.Object, &object); err != nil {
		return nil, kubeplug.InvalidInput("object: %s", err)
	}
	spec, _ := object["spec"].(map[string]any)
	metadata, _ := object["metadata"].(map[string]any)
	if spec == nil || metadata == nil || spec["app"] != nil {
		return request.Object, nil
	}
	labels, _ := metadata["labels"].(map[string]any)
	if labels == nil {
		labels = map[string]any{}
		metadata["labels"] = labels
	}
	labels["example.com/app"] = "default"
	return kubeplug.Marshal(object)
}

func init() { kubeplug.Export[Config](Exports{}) }

func main() {}
