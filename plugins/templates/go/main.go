// {{name}}: a kubeplug reconcile plugin in Go.
//
// The SDK (`kubeplug/sdk`, unpacked by `kubeplug build` into .kubeplug/)
// maps this to the WIT contract: a returned kubeplug.InvalidConfig,
// InvalidInput or Failed becomes that WIT error, any other error becomes
// `failed(message)`, and a panic is a trap whose report carries its message.
package main

import (
	"fmt"

	kubeplug "kubeplug/sdk"
)

// Config is the plugin's configuration document (none here).
type Config struct{}

// Plugin is the plugin.
type Plugin struct{}

// Example is the part of an Example the plugin reads.
type Example struct {
	Spec struct {
		Message any `json:"message"`
	} `json:"spec"`
	Status struct {
		Conditions []kubeplug.Condition `json:"conditions"`
	} `json:"status"`
}

// Manifest describes the plugin.
func (Plugin) Manifest(*Config) (*kubeplug.Manifest, error) {
	return &kubeplug.Manifest{
		Name:     "{{name}}",
		Version:  "0.1.0",
		Parent:   kubeplug.Namespaced("example.com", "v1alpha1", "Example", "examples"),
		Children: []kubeplug.Resource{kubeplug.ConfigMap},
	}, nil
}

// Reconcile gives each Example a ConfigMap of its message.
func (Plugin) Reconcile(ctx *kubeplug.Context[Config]) (*kubeplug.Response, error) {
	var example Example
	if err := ctx.ParentAs(&example); err != nil {
		return nil, err
	}
	message, ok := example.Spec.Message.(string)
	if !ok {
		return nil, kubeplug.InvalidInput("spec.message must be a string")
	}
	conditions := example.Status.Conditions
	if now, ok := kubeplug.ParseTime(ctx.Now); ok {
		conditions = kubeplug.SetCondition(conditions, kubeplug.Condition{
			Type: "Ready", Status: "True", Reason: "Reconciled", Message: "ConfigMap written",
			LastTransitionTime: now, ObservedGeneration: ctx.Generation(),
		})
	}
	return (&kubeplug.Response{}).
		Child(map[string]any{
			"apiVersion": "v1",
			"kind":       "ConfigMap",
			"metadata":   map[string]any{"name": ctx.Name() + "-message", "namespace": ctx.Namespace()},
			"data":       map[string]string{"message": message},
		}).
		Status(map[string]any{"conditions": conditions}).
		Event(kubeplug.Normal("Reconciled", fmt.Sprintf("message is %d characters", len(message)))), nil
}

func init() { kubeplug.Export[Config](Plugin{}) }

// main is never called: the component is a library the host calls.
func main() {}
