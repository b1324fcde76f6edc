package main

import (
	"encoding/json"
	"sort"

	kubeplug "kubeplug/sdk"
)

// The versions this plugin converts between (plugins/database/src/convert.rs):
// v1's spec.engine and spec.version are v2's spec.engine.name and
// .version; v2's spec.storage travels through v1 in the storage annotation.
const (
	v1 = "example.com/v1"
	v2 = "example.com/v2"
)

// Convert converts every object to apiVersion, in order.
func (DatabasePlugin) Convert(objects []json.RawMessage, apiVersion string, _ *Config) ([]json.RawMessage, error) {
	if apiVersion != v1 && apiVersion != v2 {
		return nil, kubeplug.Failed("cannot convert Databases to %s: this plugin converts between %s and %s", apiVersion, v1, v2)
	}
	out := make([]json.RawMessage, 0, len(objects))
	for _, text := range objects {
		object, err := decode(text)
		if err != nil {
			return nil, kubeplug.InvalidInput("object to convert is not JSON: %s", err)
		}
		converted, err := convertOne(object, apiVersion)
		if err != nil {
			return nil, err
		}
		out = append(out, json.RawMessage(compact(converted)))
	}
	return out, nil
}

func convertOne(object any, to string) (any, error) {
	name, ok := index(object, "metadata", "name").(string)
	if !ok {
		name = "?"
	}
	fields, ok := object.(map[string]any)
	if !ok {
		return nil, kubeplug.InvalidInput("a Database to convert must be an object, got %s", compact(object))
	}
	from, hasFrom := fields["apiVersion"].(string)
	switch {
	case hasFrom && from == to:
		return object, nil
	case hasFrom && from == v1 && to == v2:
		up(fields)
	case hasFrom && from == v2 && to == v1:
		if err := down(fields, name); err != nil {
			return nil, err
		}
	default:
		if !hasFrom {
			from = "an unknown apiVersion"
		}
		return nil, kubeplug.InvalidInput("cannot convert Database %s from %s to %s: this plugin converts between %s and %s", name, from, to, v1, v2)
	}
	fields["apiVersion"] = to
	return object, nil
}

// up is v1 → v2.
func up(object map[string]any) {
	// Read only into a spec that exists and has no storage of its own: a
	// spec made for it, or a storage overwritten, would not convert back.
	spec, isObject := object["spec"].(map[string]any)
	var storage any
	if isObject {
		if _, has := spec["storage"]; !has {
			storage = takeAnnotation(object)
		}
	}
	if !isObject {
		return
	}
	name, hasName := spec["engine"]
	version, hasVersion := spec["version"]
	delete(spec, "engine")
	delete(spec, "version")
	if hasName || hasVersion {
		engine := map[string]any{}
		if hasName {
			engine["name"] = name
		}
		if hasVersion {
			engine["version"] = version
		}
		spec["engine"] = engine
	}
	if storage != nil {
		spec["storage"] = storage
	}
}

// takeAnnotation is the storage object the annotation holds, taking the
// annotation away (and the annotations map when nothing is left in it);
// nil, touching nothing, when it holds none.
func takeAnnotation(object map[string]any) any {
	metadata, ok := object["metadata"].(map[string]any)
	if !ok {
		return nil
	}
	annotations, ok := metadata["annotations"].(map[string]any)
	if !ok {
		return nil
	}
	text, ok := annotations[storageAnnotation].(string)
	if !ok {
		return nil
	}
	storage, err := fromAnnotation(text)
	if err != nil {
		return nil
	}
	delete(annotations, storageAnnotation)
	if len(annotations) == 0 {
		delete(metadata, "annotations")
	}
	return storage
}

// down is v2 → v1.
func down(object map[string]any, name string) error {
	spec, ok := object["spec"].(map[string]any)
	if !ok {
		return nil
	}
	// Flattened only when it holds nothing else: whatever else is there
	// stays rather than being dropped.
	if engine, ok := spec["engine"].(map[string]any); ok {
		flat := true
		for k := range engine {
			flat = flat && (k == "name" || k == "version")
		}
		if flat {
			delete(spec, "engine")
			keys := make([]string, 0, len(engine))
			for k := range engine {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				key := "version"
				if k == "name" {
					key = "engine"
				}
				spec[key] = engine[k]
			}
		}
	}
	storage, has := spec["storage"]
	if !has {
		return nil
	}
	delete(spec, "storage")
	text := toAnnotation(storage)
	if _, present := object["metadata"]; !present {
		object["metadata"] = map[string]any{}
	}
	metadata, ok := object["metadata"].(map[string]any)
	if !ok {
		return kubeplug.InvalidInput("Database %s: metadata is not an object", name)
	}
	if _, present := metadata["annotations"]; !present {
		metadata["annotations"] = map[string]any{}
	}
	annotations, ok := metadata["annotations"].(map[string]any)
	if !ok {
		return kubeplug.InvalidInput("Database %s: metadata.annotations is not an object", name)
	}
	annotations[storageAnnotation] = text
	return nil
}
