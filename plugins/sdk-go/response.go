package kubeplug

import (
	"bytes"
	"encoding/json"
)

// Event is a Kubernetes Event to record on the parent.
type Event struct {
	Warning bool
	Reason  string
	Message string
}

// Normal is a `Normal` event.
func Normal(reason, message string) Event { return Event{false, reason, message} }

// Warning is a `Warning` event.
func Warning(reason, message string) Event { return Event{true, reason, message} }

// CreateOnly is the annotation that marks a child create-only (see
// [Response.CreateOnlyChild]).
const CreateOnly = "kubeplug.io/create-only"

// Response is the desired state for one parent. Its methods record the
// first serialization error, which the SDK reports as `failed`.
type Response struct {
	Children            []string
	StatusJSON          *string
	Labels              [][2]string
	Annotations         [][2]string
	RequeueAfterSeconds *uint32
	Events              []Event
	err                 error
}

// Marshal is encoding/json's Marshal without HTML escaping (as the API
// server and the other SDKs write JSON).
func Marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

func (r *Response) marshal(what string, v any) (string, bool) {
	if r.err != nil {
		return "", false
	}
	text, err := Marshal(v)
	if err != nil {
		r.err = Failed("cannot serialize %s: %s", what, err.Error())
		return "", false
	}
	return string(text), true
}

// Child adds a desired child: a map or struct with apiVersion, kind and
// metadata.name. The namespace defaults to the parent's.
func (r *Response) Child(child any) *Response {
	if text, ok := r.marshal("child", child); ok {
		r.Children = append(r.Children, text)
	}
	return r
}

// CreateOnlyChild adds a child the host creates once and never updates:
// generated credentials, anything that must not change after creation. It
// carries the `kubeplug.io/create-only: "true"` annotation.
func (r *Response) CreateOnlyChild(child any) *Response {
	text, ok := r.marshal("child", child)
	if !ok {
		return r
	}
	var object map[string]any
	dec := json.NewDecoder(bytes.NewReader([]byte(text)))
	dec.UseNumber()
	if err := dec.Decode(&object); err != nil {
		r.err = Failed("a child needs metadata")
		return r
	}
	meta, ok := object["metadata"].(map[string]any)
	if !ok {
		r.err = Failed("a child needs metadata")
		return r
	}
	annotations, ok := meta["annotations"].(map[string]any)
	if _, present := meta["annotations"]; !present {
		annotations, ok = map[string]any{}, true
		meta["annotations"] = annotations
	}
	if ok {
		annotations[CreateOnly] = "true"
	}
	return r.Child(object)
}

// Status sets the desired .status.
func (r *Response) Status(status any) *Response {
	if text, ok := r.marshal("status", status); ok {
		r.StatusJSON = &text
	}
	return r
}

// Label sets a label on the parent (decorator mode).
func (r *Response) Label(key, value string) *Response {
	r.Labels = append(r.Labels, [2]string{key, value})
	return r
}

// Annotation sets an annotation on the parent (decorator mode).
func (r *Response) Annotation(key, value string) *Response {
	r.Annotations = append(r.Annotations, [2]string{key, value})
	return r
}

// RequeueAfter asks to reconcile again after seconds even without events.
func (r *Response) RequeueAfter(seconds uint32) *Response {
	r.RequeueAfterSeconds = &seconds
	return r
}

// Event records an event on the parent.
func (r *Response) Event(event Event) *Response {
	r.Events = append(r.Events, event)
	return r
}

// Err is the first serialization error, if any.
func (r *Response) Err() error { return r.err }

// FinalizeResponse is the answer to finalize.
type FinalizeResponse struct {
	Done                bool
	RequeueAfterSeconds *uint32
	Events              []Event
}

// Done: cleanup is complete, the host may remove the finalizer.
func Done() *FinalizeResponse { return &FinalizeResponse{Done: true} }

// Pending: cleanup is still running, ask again after seconds.
func Pending(seconds uint32) *FinalizeResponse {
	return &FinalizeResponse{RequeueAfterSeconds: &seconds}
}
