package kubeplug

import (
	"bytes"
	"encoding/json"
)

// Context is the request of one reconcile (or finalize), with the
// plugin's configuration.
type Context[C any] struct {
	// Parent is the parent object (JSON).
	Parent json.RawMessage
	// Observed are the parent's children the host observed (JSON).
	Observed []json.RawMessage
	// Related are the related objects selected per the manifest, then
	// the objects the parent's references name (JSON).
	Related []json.RawMessage
	// Config is the plugin's configuration.
	Config *C
	// Now is the current time, RFC 3339 UTC: use it instead of a clock.
	Now string
	// Entropy is 32 random bytes, fresh for every call.
	Entropy []byte

	parent   header
	observed []header
	related  []header
}

// header is what the SDK reads of every object: its type and identity.
type header struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name       string          `json:"name"`
		Namespace  string          `json:"namespace"`
		Generation json.RawMessage `json:"generation"`
	} `json:"metadata"`
	Status json.RawMessage `json:"status"`
}

func readHeader(object json.RawMessage) header {
	var h header
	_ = json.Unmarshal(object, &h)
	return h
}

// NewContext builds a context by hand, for unit tests of plugin logic.
func NewContext[C any](parent json.RawMessage, config *C, now string) *Context[C] {
	entropy := make([]byte, 32)
	return newContext(parent, nil, nil, config, now, entropy)
}

func newContext[C any](parent json.RawMessage, observed, related []json.RawMessage, config *C, now string, entropy []byte) *Context[C] {
	ctx := &Context[C]{Parent: parent, Observed: observed, Related: related, Config: config, Now: now, Entropy: entropy}
	ctx.parent = readHeader(parent)
	for _, o := range observed {
		ctx.observed = append(ctx.observed, readHeader(o))
	}
	for _, o := range related {
		ctx.related = append(ctx.related, readHeader(o))
	}
	return ctx
}

// ParentAs reads the parent into v (a pointer to your CRD struct); an
// error is [InvalidInput] naming the parent.
func (ctx *Context[C]) ParentAs(v any) error {
	if err := json.Unmarshal(ctx.Parent, v); err != nil {
		return InvalidInput("parent: %s", err.Error())
	}
	return nil
}

// Name is the parent's metadata.name.
func (ctx *Context[C]) Name() string { return ctx.parent.Metadata.Name }

// Namespace is the parent's metadata.namespace (empty when cluster-scoped).
func (ctx *Context[C]) Namespace() string { return ctx.parent.Metadata.Namespace }

// Generation is the parent's metadata.generation, for
// status.observedGeneration; nil when it has none.
func (ctx *Context[C]) Generation() *int64 {
	var g int64
	if len(ctx.parent.Metadata.Generation) == 0 || json.Unmarshal(ctx.parent.Metadata.Generation, &g) != nil {
		return nil
	}
	return &g
}

// Status is the parent's current .status (nil when it has none).
func (ctx *Context[C]) Status() json.RawMessage {
	if len(ctx.parent.Status) == 0 || bytes.Equal(ctx.parent.Status, []byte("null")) {
		return nil
	}
	return ctx.parent.Status
}

// ObservedOf are the observed children of apiVersion and kind.
func (ctx *Context[C]) ObservedOf(apiVersion, kind string) []json.RawMessage {
	return of(ctx.Observed, ctx.observed, apiVersion, kind)
}

// ObservedNamed is the observed child of apiVersion and kind named name.
func (ctx *Context[C]) ObservedNamed(apiVersion, kind, name string) (json.RawMessage, bool) {
	for i, h := range ctx.observed {
		if h.APIVersion == apiVersion && h.Kind == kind && h.Metadata.Name == name {
			return ctx.Observed[i], true
		}
	}
	return nil, false
}

// RelatedOf are the related objects of apiVersion and kind.
func (ctx *Context[C]) RelatedOf(apiVersion, kind string) []json.RawMessage {
	return of(ctx.Related, ctx.related, apiVersion, kind)
}

// RelatedNamed is the related object of apiVersion and kind named name in
// the parent's namespace (or cluster-scoped): how a plugin reads an object
// its parent references by name.
func (ctx *Context[C]) RelatedNamed(apiVersion, kind, name string) (json.RawMessage, bool) {
	for i, h := range ctx.related {
		if h.APIVersion == apiVersion && h.Kind == kind && h.Metadata.Name == name &&
			(h.Metadata.Namespace == "" || h.Metadata.Namespace == ctx.Namespace()) {
			return ctx.Related[i], true
		}
	}
	return nil, false
}

func of(objects []json.RawMessage, headers []header, apiVersion, kind string) []json.RawMessage {
	var out []json.RawMessage
	for i, h := range headers {
		if h.APIVersion == apiVersion && h.Kind == kind {
			out = append(out, objects[i])
		}
	}
	return out
}

// As reads each object into a new T, skipping those that do not read (the
// API server validated them; a plugin cannot do better).
func As[T any](objects []json.RawMessage) []T {
	var out []T
	for _, o := range objects {
		var v T
		if json.Unmarshal(o, &v) == nil {
			out = append(out, v)
		}
	}
	return out
}
