package main

import (
	"encoding/json"
	"fmt"
	"strings"

	kubeplug "kubeplug/sdk"
)

// Database is a `Database` object as this plugin reads it (kept in sync
// with crds/databases.example.com.yaml; checked again here because the
// plugin may run on any input).
type Database struct {
	Metadata kubeplug.Meta
	Spec     DatabaseSpec
}

// DatabaseSpec is `Database.spec`.
type DatabaseSpec struct {
	Engine   Engine
	Version  string
	Replicas int32
}

const (
	minReplicas = 1
	maxReplicas = 10
)

// readDatabase reads the parent, with the Rust plugin's (serde's) errors.
func readDatabase(parent json.RawMessage) (*Database, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(parent, &top); err != nil {
		return nil, kubeplug.InvalidInput("parent: invalid type: expected struct Database")
	}
	db := &Database{}
	metadata, ok := top["metadata"]
	if !ok {
		return nil, kubeplug.InvalidInput("parent: missing field `metadata`")
	}
	if err := json.Unmarshal(metadata, &db.Metadata); err != nil {
		return nil, kubeplug.InvalidInput("parent: %s", err.Error())
	}
	specText, ok := top["spec"]
	if !ok {
		return nil, kubeplug.InvalidInput("parent: missing field `spec`")
	}
	var spec map[string]json.RawMessage
	if err := json.Unmarshal(specText, &spec); err != nil || spec == nil {
		return nil, kubeplug.InvalidInput("parent: invalid type: %s, expected struct DatabaseSpec", describe(specText))
	}
	engineText, ok := spec["engine"]
	if !ok {
		return nil, kubeplug.InvalidInput("parent: missing field `engine`")
	}
	var engine string
	if err := json.Unmarshal(engineText, &engine); err != nil {
		return nil, kubeplug.InvalidInput("parent: invalid type: %s, expected enum Engine", describe(engineText))
	}
	if db.Spec.Engine, ok = engineNamed(engine); !ok {
		return nil, kubeplug.InvalidInput("parent: unknown variant `%s`, expected one of `mysql`, `postgresql`, `mongodb`", engine)
	}
	versionText, ok := spec["version"]
	if !ok {
		return nil, kubeplug.InvalidInput("parent: missing field `version`")
	}
	if err := json.Unmarshal(versionText, &db.Spec.Version); err != nil || string(versionText) == "null" {
		return nil, kubeplug.InvalidInput("parent: invalid type: %s, expected a string", describe(versionText))
	}
	db.Spec.Replicas = 1
	if replicas, ok := spec["replicas"]; ok {
		if err := json.Unmarshal(replicas, &db.Spec.Replicas); err != nil || string(replicas) == "null" {
			return nil, kubeplug.InvalidInput("parent: invalid type: %s, expected i32", describe(replicas))
		}
	}
	return db, nil
}

// describe names a JSON value as serde's "invalid type" errors do.
func describe(text json.RawMessage) string {
	var v any
	_ = json.Unmarshal(text, &v)
	switch v := v.(type) {
	case nil:
		return "null"
	case bool:
		return fmt.Sprintf("boolean `%t`", v)
	case float64:
		return fmt.Sprintf("floating point `%s`", strings.TrimSpace(string(text)))
	case string:
		return fmt.Sprintf("string %s", quote(v))
	case []any:
		return "sequence"
	default:
		return "map"
	}
}

// Validate checks what the schema also checks.
func (s DatabaseSpec) Validate() error {
	if s.Replicas < minReplicas || s.Replicas > maxReplicas {
		return kubeplug.InvalidInput("spec.replicas must be between %d and %d, got %d", minReplicas, maxReplicas, s.Replicas)
	}
	if !isXYZ(s.Version) {
		return kubeplug.InvalidInput("spec.version must look like x.y.z, got %s", quote(s.Version))
	}
	return nil
}

func isDigits(p string) bool {
	if p == "" {
		return false
	}
	for i := 0; i < len(p); i++ {
		if p[i] < '0' || p[i] > '9' {
			return false
		}
	}
	return true
}

func isXYZ(version string) bool {
	parts := strings.Split(version, ".")
	if len(parts) != 3 {
		return false
	}
	for _, p := range parts {
		if !isDigits(p) {
			return false
		}
	}
	return true
}

// quote is a string as Rust's `{:?}` writes it.
func quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == 0:
			b.WriteString(`\0`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\u{%x}`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
