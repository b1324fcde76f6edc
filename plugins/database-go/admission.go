package main

import (
	"fmt"
	"strings"

	kubeplug "kubeplug/sdk"
)

// Validate judges one write of a Database (plugins/database/src/admission.rs):
// the engine may not change, the version must be a line the image ships,
// the storage annotation must read back as v2's spec.storage. An update is
// judged on what it changes; deletes are always allowed.
func (DatabasePlugin) Validate(request *kubeplug.AdmissionRequest[Config]) (*kubeplug.Verdict, error) {
	if request.Operation == kubeplug.Delete || request.Object == nil {
		return kubeplug.Allow(), nil
	}
	object, err := decode(request.Object)
	if err != nil {
		return nil, kubeplug.InvalidInput("object is not JSON: %s", err)
	}
	var old any
	hasOld := false
	if request.Operation == kubeplug.Update && request.OldObject != nil {
		if old, err = decode(request.OldObject); err != nil {
			return nil, kubeplug.InvalidInput("old object is not JSON: %s", err)
		}
		hasOld = true
	}
	var f findings

	engine := index(object, "spec", "engine")
	var was any
	wasSet := false
	if hasOld {
		if w := index(old, "spec", "engine"); !same(w, engine) {
			was, wasSet = w, true
		}
	}
	if wasSet {
		text, ok := was.(string)
		if !ok {
			text = compact(was)
		}
		f.deny("spec.engine", fmt.Sprintf("is immutable after creation (was %s)", text))
	}

	version := index(object, "spec", "version")
	if name, ok := engine.(string); ok {
		if parsed, ok := engineNamed(name); ok {
			if text, ok := version.(string); ok {
				if err := checkVersion(parsed, text); err != nil {
					changed := wasSet || !hasOld || !same(index(old, "spec", "version"), version)
					f.judge(changed, "spec.version", err.Error())
				}
			}
		}
	}

	annotation := index(object, "metadata", "annotations", storageAnnotation)
	if annotation != nil {
		var reason error
		if text, ok := annotation.(string); !ok {
			reason = fmt.Errorf("%s must be a string", storageAnnotation)
		} else {
			_, reason = fromAnnotation(text)
		}
		if reason != nil {
			changed := !hasOld || !same(index(old, "metadata", "annotations", storageAnnotation), annotation)
			f.judge(changed, "metadata.annotations", reason.Error())
		}
	}
	return f.verdict(), nil
}

// findings are the causes to deny and warnings to give, over every check,
// so that one answer names every problem.
type findings struct {
	causes   []kubeplug.Cause
	warnings []string
}

func (f *findings) deny(field, message string) {
	f.causes = append(f.causes, kubeplug.Cause{Field: field, Message: message})
}

// judge denies what this write changes and only warns about what it keeps.
func (f *findings) judge(changed bool, field, message string) {
	if changed {
		f.deny(field, message)
		return
	}
	f.warnings = append(f.warnings, fmt.Sprintf("%s: %s (kept: this update leaves it unchanged)", field, message))
}

func (f *findings) verdict() *kubeplug.Verdict {
	if len(f.causes) == 0 {
		return &kubeplug.Verdict{Warnings: f.warnings}
	}
	parts := make([]string, len(f.causes))
	for i, c := range f.causes {
		parts[i] = c.Field + ": " + c.Message
	}
	return &kubeplug.Verdict{Denied: true, Message: strings.Join(parts, "; "), Causes: f.causes}
}
