package main

import (
	"bytes"
	"encoding/json"
	"reflect"

	kubeplug "kubeplug/sdk"
)

// decode reads JSON into maps, slices and json.Numbers (numbers keep
// their text, as the Rust plugin's serde_json values keep their value).
func decode(text []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(text))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, &json.SyntaxError{Offset: dec.InputOffset()}
	}
	return v, nil
}

// compact is v as compact JSON, keys sorted (serde_json's to_string of a
// value).
func compact(v any) string {
	text, err := kubeplug.Marshal(v)
	if err != nil {
		return "null"
	}
	return string(text)
}

// index is v[keys...] as serde_json's Index reads it: nil (null) for a
// missing key or a non-object.
func index(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

func same(a, b any) bool { return reflect.DeepEqual(a, b) }
