package main

import (
	"fmt"
	"sort"
	"strings"
)

// storageAnnotation is the v1 annotation holding a v2 object's
// spec.storage, as compact JSON with sorted keys; only that text is read
// back (plugins/database/src/storage.rs).
const storageAnnotation = "databases.example.com/storage"

func toAnnotation(storage any) string { return compact(storage) }

// fromAnnotation is the storage object the annotation's text holds, or
// why it holds none.
func fromAnnotation(text string) (any, error) {
	storage, err := decode([]byte(text))
	if err != nil {
		return nil, fmt.Errorf("%s must be a JSON object such as {\"size\":\"1Gi\"}: %s", storageAnnotation, err)
	}
	if err := checkStorage(storage); err != nil {
		return nil, fmt.Errorf("%s: %s", storageAnnotation, err)
	}
	if canonical := toAnnotation(storage); canonical != text {
		return nil, fmt.Errorf("%s must be written as %s (compact, keys sorted)", storageAnnotation, canonical)
	}
	return storage, nil
}

func checkStorage(storage any) error {
	fields, ok := storage.(map[string]any)
	if !ok {
		return fmt.Errorf("%s is not an object", compact(storage))
	}
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if k != "size" {
			return fmt.Errorf("unknown field %s (storage has only size)", quote(k))
		}
	}
	size, present := fields["size"]
	if !present {
		return nil
	}
	if s, ok := size.(string); ok && isSize(s) {
		return nil
	}
	return fmt.Errorf("size must be a byte quantity such as \"1Gi\" or \"500M\", got %s", compact(size))
}

var suffixes = []string{"Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "k", "M", "G", "T", "P", "E"}

// isSize: a byte quantity as v2's schema spells it
// (`^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$`).
func isSize(size string) bool {
	number := size
	for _, s := range suffixes {
		if strings.HasSuffix(size, s) {
			number = strings.TrimSuffix(size, s)
			break
		}
	}
	if whole, fraction, ok := strings.Cut(number, "."); ok {
		return isDigits(whole) && isDigits(fraction)
	}
	return isDigits(number)
}
