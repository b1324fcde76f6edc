package kubeplug

import (
	"bytes"
	"encoding/json"
)

// request is the WIT's `request`, lifted.
type request struct {
	parent   string
	observed []string
	related  []string
	config   string
	now      string
	entropy  []byte
}

// admissionRequest is the WIT's `admission-request`, lifted.
type admissionRequest struct {
	operation Operation
	object    *string
	oldObject *string
	username  string
	groups    []string
	dryRun    bool
	config    string
	now       string
}

// handler is what the ABI glue calls: one plugin, its config type erased.
type handler interface {
	manifest(config string) (*Manifest, *Error)
	metadataOnly(config string) []Resource
	referenceKinds(config string) []Resource
	references(parent, config string) ([]Reference, *Error)
	reconcile(r request) (*Response, *Error)
	finalize(r request) (*FinalizeResponse, *Error)
	offered(config string) []Webhook
	validate(r admissionRequest) (*Verdict, *Error)
	mutate(r admissionRequest) (*string, *Error)
	convert(objects []string, apiVersion, config string) ([]string, *Error)
}

// registered is the plugin [Export] registered.
var registered handler

// Export registers p as the component's plugin. Call it from an init
// function of package main.
func Export[C any](p Plugin[C]) {
	registered = adapter[C]{p}
}

type adapter[C any] struct{ plugin Plugin[C] }

func fail(err error) *Error {
	if err == nil {
		return nil
	}
	return asError(err)
}

func (a adapter[C]) manifest(config string) (*Manifest, *Error) {
	c, err := parseConfig[C](config)
	if err != nil {
		return nil, fail(err)
	}
	m, err := a.plugin.Manifest(c)
	if err != nil {
		return nil, fail(err)
	}
	if m == nil {
		return nil, &Error{KindFailed, "Manifest returned no manifest"}
	}
	return m, nil
}

func (a adapter[C]) metadataOnly(config string) []Resource {
	if m, err := a.manifest(config); err == nil {
		return m.MetadataOnly
	}
	return nil
}

func (a adapter[C]) referenceKinds(config string) []Resource {
	if m, err := a.manifest(config); err == nil {
		return m.References
	}
	return nil
}

func (a adapter[C]) offered(config string) []Webhook {
	if m, err := a.manifest(config); err == nil {
		return m.Webhooks
	}
	return nil
}

func (a adapter[C]) references(parent, config string) ([]Reference, *Error) {
	c, err := parseConfig[C](config)
	if err != nil {
		return nil, fail(err)
	}
	if !json.Valid([]byte(parent)) {
		return nil, &Error{KindInvalidInput, "parent is not JSON"}
	}
	r, ok := a.plugin.(Referencer[C])
	if !ok {
		return nil, nil
	}
	refs, err := r.References(json.RawMessage(parent), c)
	return refs, fail(err)
}

func (a adapter[C]) context(r request) (*Context[C], *Error) {
	c, err := parseConfig[C](r.config)
	if err != nil {
		return nil, fail(err)
	}
	parse := func(what, text string) (json.RawMessage, *Error) {
		if !json.Valid([]byte(text)) {
			return nil, &Error{KindInvalidInput, what + " is not JSON"}
		}
		return json.RawMessage(text), nil
	}
	parent, e := parse("parent", r.parent)
	if e != nil {
		return nil, e
	}
	var observed, related []json.RawMessage
	for _, o := range r.observed {
		v, e := parse("observed object", o)
		if e != nil {
			return nil, e
		}
		observed = append(observed, v)
	}
	for _, o := range r.related {
		v, e := parse("related object", o)
		if e != nil {
			return nil, e
		}
		related = append(related, v)
	}
	return newContext(parent, observed, related, c, r.now, r.entropy), nil
}

func (a adapter[C]) reconcile(r request) (*Response, *Error) {
	ctx, e := a.context(r)
	if e != nil {
		return nil, e
	}
	resp, err := a.plugin.Reconcile(ctx)
	if err != nil {
		return nil, fail(err)
	}
	if resp == nil {
		resp = &Response{}
	}
	if resp.err != nil {
		return nil, fail(resp.err)
	}
	return resp, nil
}

func (a adapter[C]) finalize(r request) (*FinalizeResponse, *Error) {
	ctx, e := a.context(r)
	if e != nil {
		return nil, e
	}
	f, ok := a.plugin.(Finalizer[C])
	if !ok {
		return Done(), nil
	}
	resp, err := f.Finalize(ctx)
	if err != nil {
		return nil, fail(err)
	}
	if resp == nil {
		resp = Done()
	}
	return resp, nil
}

func (a adapter[C]) admission(r admissionRequest) (*AdmissionRequest[C], *Error) {
	c, err := parseConfig[C](r.config)
	if err != nil {
		return nil, fail(err)
	}
	parse := func(what string, text *string) (json.RawMessage, *Error) {
		if text == nil {
			return nil, nil
		}
		if !json.Valid([]byte(*text)) {
			return nil, &Error{KindInvalidInput, what + " is not JSON"}
		}
		return json.RawMessage(*text), nil
	}
	object, e := parse("object", r.object)
	if e != nil {
		return nil, e
	}
	old, e := parse("old object", r.oldObject)
	if e != nil {
		return nil, e
	}
	return &AdmissionRequest[C]{r.operation, object, old, r.username, r.groups, r.dryRun, c, r.now}, nil
}

func (a adapter[C]) validate(r admissionRequest) (*Verdict, *Error) {
	req, e := a.admission(r)
	if e != nil {
		return nil, e
	}
	v, ok := a.plugin.(Validator[C])
	if !ok {
		return Allow(), nil
	}
	verdict, err := v.Validate(req)
	if err != nil {
		return nil, fail(err)
	}
	if verdict == nil {
		verdict = Allow()
	}
	return verdict, nil
}

// mutate answers none also when the plugin hands the object back
// unchanged (as JSON), so the host sees no patch to check.
func (a adapter[C]) mutate(r admissionRequest) (*string, *Error) {
	req, e := a.admission(r)
	if e != nil {
		return nil, e
	}
	m, ok := a.plugin.(Mutator[C])
	if !ok {
		return nil, nil
	}
	object, err := m.Mutate(req)
	if err != nil {
		return nil, fail(err)
	}
	if object == nil || sameJSON(object, req.Object) {
		return nil, nil
	}
	text := string(object)
	return &text, nil
}

func sameJSON(a, b json.RawMessage) bool {
	if b == nil {
		return false
	}
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return bytes.Equal(a, b)
	}
	ca, _ := Marshal(x)
	cb, _ := Marshal(y)
	return bytes.Equal(ca, cb)
}

func (a adapter[C]) convert(objects []string, apiVersion, config string) ([]string, *Error) {
	c, err := parseConfig[C](config)
	if err != nil {
		return nil, fail(err)
	}
	raw := make([]json.RawMessage, len(objects))
	for i, o := range objects {
		if !json.Valid([]byte(o)) {
			return nil, &Error{KindInvalidInput, "object to convert is not JSON"}
		}
		raw[i] = json.RawMessage(o)
	}
	var converted []json.RawMessage
	if cv, ok := a.plugin.(Converter[C]); ok {
		converted, err = cv.Convert(raw, apiVersion, c)
	} else {
		name := "this plugin"
		if m, e := a.manifest(config); e == nil {
			name = m.Name
		}
		converted, err = convertNone(name, raw, apiVersion)
	}
	if err != nil {
		return nil, fail(err)
	}
	out := make([]string, len(converted))
	for i, o := range converted {
		out[i] = string(o)
	}
	return out, nil
}
