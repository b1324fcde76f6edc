package kubeplug

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// UnknownField checks that the JSON object text has no top-level key but
// those known, and names the first other one as serde's
// `deny_unknown_fields` does (`unknown field `x`, expected `a` or `b` at
// line 1 column 5`), so that a Go port of a Rust plugin refuses a
// configuration with the same message. nil when text is not an object:
// json.Unmarshal reports that.
func UnknownField(text []byte, known ...string) error {
	dec := json.NewDecoder(bytes.NewReader(text))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil
		}
		key, _ := t.(string)
		if !contains(known, key) {
			offset := int(dec.InputOffset())
			line := 1 + bytes.Count(text[:offset], []byte("\n"))
			column := offset - (bytes.LastIndexByte(text[:offset], '\n') + 1)
			return fmt.Errorf("unknown field `%s`, %s at line %d column %d", key, expected(known), line, column)
		}
		var skip json.RawMessage
		if dec.Decode(&skip) != nil {
			return nil
		}
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, k := range list {
		if k == s {
			return true
		}
	}
	return false
}

// expected lists fields as serde does.
func expected(known []string) string {
	quoted := make([]string, len(known))
	for i, k := range known {
		quoted[i] = "`" + k + "`"
	}
	switch len(known) {
	case 0:
		return "there are no fields"
	case 1:
		return "expected " + quoted[0]
	case 2:
		return "expected " + quoted[0] + " or " + quoted[1]
	default:
		return "expected one of " + strings.Join(quoted, ", ")
	}
}
