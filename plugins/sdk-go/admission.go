package kubeplug

import "encoding/json"

// Operation is what a write does to the parent.
type Operation int

const (
	Create Operation = iota
	Update
	Delete
)

// AdmissionRequest is one write of a parent, as the API server asks about it.
type AdmissionRequest[C any] struct {
	Operation Operation
	// Object is the object as the write would store it; nil on delete.
	Object json.RawMessage
	// OldObject is the stored object before the write; nil on create.
	OldObject json.RawMessage
	Username  string
	Groups    []string
	DryRun    bool
	Config    *C
	// Now is the current time, RFC 3339 UTC.
	Now string
}

// Cause is why one field is refused.
type Cause struct {
	// Field as kubectl prints it, e.g. `spec.engine`.
	Field   string
	Message string
}

// Verdict is a validation's answer: allowed with warnings, or denied.
type Verdict struct {
	Denied   bool
	Warnings []string
	Message  string
	Causes   []Cause
}

// Allow is allowed, no warnings.
func Allow() *Verdict { return &Verdict{} }

// Deny is denied for message, naming no field.
func Deny(message string) *Verdict { return &Verdict{Denied: true, Message: message} }

// DenyField is denied because of field.
func DenyField(field, message string) *Verdict {
	return &Verdict{Denied: true, Message: field + ": " + message, Causes: []Cause{Cause{field, message}}}
}

// Warn adds a warning (ignored on a denial).
func (v *Verdict) Warn(warning string) *Verdict {
	if !v.Denied {
		v.Warnings = append(v.Warnings, warning)
	}
	return v
}
