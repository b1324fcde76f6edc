// Package kubeplug is the Go SDK for kubeplug plugins.
//
// A plugin implements [Plugin] for its configuration type and registers
// itself from an init function with [Export]; `main` stays empty (the
// component is a library the host calls, `go build -buildmode=c-shared`):
//
//	type Config struct{}
//	type Hello struct{}
//
//	func (Hello) Manifest(config *Config) (*kubeplug.Manifest, error) {
//		return &kubeplug.Manifest{Name: "hello", Version: "0.1.0",
//			Parent: kubeplug.Namespaced("example.com", "v1", "Hello", "hellos")}, nil
//	}
//
//	func (Hello) Reconcile(ctx *kubeplug.Context[Config]) (*kubeplug.Response, error) {
//		return &kubeplug.Response{}, nil
//	}
//
//	func init() { kubeplug.Export[Config](Hello{}) }
//	func main() {}
//
// The optional exports are interfaces a plugin may also implement:
// [Finalizer], [Referencer], [Validator], [Mutator] and [Converter]; one it
// does not implement answers as in the Rust, Python and TypeScript SDKs.
// Objects cross the boundary as JSON text: read them into your own structs
// of the fields you use (encoding/json), build children as maps or structs.
//
// The canonical-ABI glue for wit/plugin.wit is in abi.go, written by hand
// and guarded by check-wit; the SDK's build (`build`) makes the core module
// a component with kubeplug's preview1 shim: a plugin has no files, network
// or environment, and reads time and randomness from the request.
package kubeplug

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// ErrorKind is the kind of an [Error], as the WIT's `error` variant.
type ErrorKind int

const (
	// KindInvalidConfig: the configuration document is not acceptable.
	KindInvalidConfig ErrorKind = iota
	// KindInvalidInput: the parent (or an observed object) is not acceptable.
	KindInvalidInput
	// KindFailed: anything else; the host records it and retries with backoff.
	KindFailed
)

// Error is a failure the plugin reports on purpose. Any other error a
// plugin returns is reported as `failed` with its message.
type Error struct {
	Kind    ErrorKind
	Message string
}

func (e *Error) Error() string {
	switch e.Kind {
	case KindInvalidConfig:
		return "invalid config: " + e.Message
	case KindInvalidInput:
		return "invalid input: " + e.Message
	default:
		return "failed: " + e.Message
	}
}

// InvalidConfig is the error for a configuration document that is not
// acceptable (formatted as fmt.Sprintf).
func InvalidConfig(format string, args ...any) error {
	return &Error{KindInvalidConfig, sprintf(format, args)}
}

// InvalidInput is the error for a parent or observed object that is not
// acceptable.
func InvalidInput(format string, args ...any) error {
	return &Error{KindInvalidInput, sprintf(format, args)}
}

// Failed is the error for anything else.
func Failed(format string, args ...any) error {
	return &Error{KindFailed, sprintf(format, args)}
}

func sprintf(format string, args []any) string {
	if len(args) == 0 {
		return format
	}
	return fmt.Sprintf(format, args...)
}

// asError is err as the WIT's error: an [*Error] keeps its kind, anything
// else is `failed` with its message.
func asError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{KindFailed, err.Error()}
}

// Plugin is a reconcile plugin for configuration type C: a pure function
// from what the host observed to what should exist.
type Plugin[C any] interface {
	// Manifest describes the plugin. Called once when the host loads it;
	// return [InvalidConfig] to refuse a bad configuration.
	Manifest(config *C) (*Manifest, error)
	// Reconcile decides the desired children, status and parent patch
	// for one parent.
	Reconcile(ctx *Context[C]) (*Response, error)
}

// Finalizer cleans up for a parent being deleted (only called when the
// manifest declares a finalizer). Without it, cleanup is done at once.
type Finalizer[C any] interface {
	Finalize(ctx *Context[C]) (*FinalizeResponse, error)
}

// Referencer names the objects a parent references, of the kinds the
// manifest declares in References; the host hands those it finds in the
// request's related objects. Without it, a parent names nothing.
type Referencer[C any] interface {
	References(parent json.RawMessage, config *C) ([]Reference, error)
}

// Validator allows or denies writes of the parent kind (offered with
// [Validate] in the manifest's Webhooks). Without it, every write is
// allowed.
type Validator[C any] interface {
	Validate(request *AdmissionRequest[C]) (*Verdict, error)
}

// Mutator defaults a parent on create and update: the whole object as it
// should be stored, or nil to leave it. Without it, nothing changes.
type Mutator[C any] interface {
	Mutate(request *AdmissionRequest[C]) (json.RawMessage, error)
}

// Converter converts objects of the parent kind to apiVersion, in order
// and without loss. Without it, objects already at apiVersion pass and
// any other is an error.
type Converter[C any] interface {
	Convert(objects []json.RawMessage, apiVersion string, config *C) ([]json.RawMessage, error)
}

// parseConfig reads the configuration document into a new C: `{}` when
// empty. Unknown fields are refused when C's type says so: implement
// json.Unmarshaler, or use [StrictConfig].
func parseConfig[C any](text string) (*C, error) {
	if strings.TrimSpace(text) == "" {
		text = "{}"
	}
	config := new(C)
	if err := json.Unmarshal([]byte(text), config); err != nil {
		return nil, &Error{KindInvalidConfig, err.Error()}
	}
	return config, nil
}

// convertNone is what a plugin without [Converter] answers: objects
// already at apiVersion pass, any other is an error naming the plugin.
func convertNone(name string, objects []json.RawMessage, apiVersion string) ([]json.RawMessage, error) {
	for _, object := range objects {
		var head struct {
			APIVersion *string `json:"apiVersion"`
		}
		_ = json.Unmarshal(object, &head)
		if head.APIVersion == nil || *head.APIVersion != apiVersion {
			from := "an object without apiVersion"
			if head.APIVersion != nil {
				from = *head.APIVersion
			}
			return nil, Failed("%s converts no versions: cannot convert %s to %s", name, from, apiVersion)
		}
	}
	return objects, nil
}
