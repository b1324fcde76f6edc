package kubeplug

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestTimesReadAsTheRustSDKReadsThem(t *testing.T) {
	// The Rust SDK's cases (plugins/sdk/src/conditions.rs), checked there
	// against k8s-openapi: normalized text, or "" when refused.
	cases := map[string]string{
		"2026-11-30T10:00:00Z":            "2026-11-30T10:00:00Z",
		"2026-11-30t10:00:00z":            "2026-11-30T10:00:00Z",
		"2026-11-30 10:00:00Z":            "2026-11-30T10:00:00Z",
		"2026-11-30T10:00Z":               "2026-11-30T10:00:00Z",
		"2026-11-30T10:00:00.5Z":          "2026-11-30T10:00:00Z",
		"2026-11-30T10:00:00.1234567890Z": "",
		"2026-11-30T10:00:00.Z":           "",
		"2026-11-30T23:30:00-01:00":       "2026-12-01T00:30:00Z",
		"2026-11-30T00:30:00+0130":        "2026-11-29T23:00:00Z",
		"2026-11-30T00:30:00+01":          "2026-11-29T23:30:00Z",
		"2026-11-30T00:30:00+26:00":       "",
		"2024-02-29T12:00:00Z":            "2024-02-29T12:00:00Z",
		"2023-02-29T12:00:00Z":            "",
		"2026-12-31T23:59:60Z":            "2026-12-31T23:59:59Z",
		"2026-12-31T24:00:00Z":            "",
		"1969-12-31T23:59:59Z":            "1969-12-31T23:59:59Z",
		"0000-01-01T00:00:00+01:00":       "-001-12-31T23:00:00Z",
		"9999-12-30T22:00:01Z":            "",
		"2026-11-30":                      "",
		" 2026-11-30T10:00:00Z":           "",
	}
	for text, want := range cases {
		got, ok := ParseTime(text)
		if string(got) != want || ok != (want != "") {
			t.Errorf("ParseTime(%q) = %q, %v; want %q", text, got, ok, want)
		}
	}
}

func TestConditionsReadAndWriteAsK8sOpenAPIDoes(t *testing.T) {
	var c Condition
	in := `{"type":"Ready","status":null,"lastTransitionTime":"2026-11-30T10:00:00.25+02:00","extra":[1]}`
	if err := json.Unmarshal([]byte(in), &c); err != nil {
		t.Fatal(err)
	}
	out, _ := Marshal(c)
	want := `{"lastTransitionTime":"2026-11-30T08:00:00Z","message":"","reason":"","status":"","type":"Ready"}`
	if string(out) != want {
		t.Errorf("got %s, want %s", out, want)
	}
	for _, bad := range []string{`{"type":"Ready"}`, `{"type":1,"lastTransitionTime":"2026-11-30T10:00:00Z"}`, `{"lastTransitionTime":"yesterday"}`} {
		if json.Unmarshal([]byte(bad), &c) == nil {
			t.Errorf("%s read", bad)
		}
	}
}

func TestSetConditionKeepsTheTransitionTimeWhileTheStatusStays(t *testing.T) {
	old := []Condition{Condition{Type: "Ready", Status: "True", LastTransitionTime: "2026-01-01T00:00:00Z"}}
	kept := SetCondition(old, Condition{Type: "Ready", Status: "True", Reason: "R", LastTransitionTime: "2026-02-01T00:00:00Z"})
	if kept[0].LastTransitionTime != "2026-01-01T00:00:00Z" || kept[0].Reason != "R" {
		t.Errorf("%+v", kept)
	}
	moved := SetCondition(kept, Condition{Type: "Ready", Status: "False", LastTransitionTime: "2026-03-01T00:00:00Z"})
	if moved[0].LastTransitionTime != "2026-03-01T00:00:00Z" || len(moved) != 1 {
		t.Errorf("%+v", moved)
	}
}

func TestAnUnknownFieldIsNamedAsSerdeNamesIt(t *testing.T) {
	err := UnknownField([]byte(`{"registry":"x"}`), "imageRegistry", "engineRegistries")
	want := "unknown field `registry`, expected `imageRegistry` or `engineRegistries` at line 1 column 11"
	if err == nil || err.Error() != want {
		t.Errorf("got %v, want %s", err, want)
	}
	err = UnknownField([]byte("{\n  \"a\": 1,\n  \"zz\": 2}"), "a", "b", "c")
	want = "unknown field `zz`, expected one of `a`, `b`, `c` at line 3 column 6"
	if err == nil || err.Error() != want {
		t.Errorf("got %v, want %s", err, want)
	}
	if err := UnknownField([]byte(`{"a":{"zz":1}}`), "a"); err != nil {
		t.Errorf("nested keys are the field's own: %v", err)
	}
}

type testConfig struct {
	Name string `json:"name"`
}

type bare struct{}

func (bare) Manifest(c *testConfig) (*Manifest, error) {
	if c.Name == "bad" {
		return nil, InvalidConfig("name %q is bad", c.Name)
	}
	return &Manifest{Name: "bare", Webhooks: []Webhook{Validate}}, nil
}

func (bare) Reconcile(ctx *Context[testConfig]) (*Response, error) {
	if ctx.Name() == "boom" {
		return nil, json.Unmarshal([]byte("{"), new(any))
	}
	return (&Response{}).
		CreateOnlyChild(map[string]any{"apiVersion": "v1", "kind": "Secret", "metadata": map[string]any{"name": "s<&>"}}).
		Status(map[string]any{"at": ctx.Now}), nil
}

func TestThePluginsAnswersBecomeTheContractsAnswers(t *testing.T) {
	a := adapter[testConfig]{bare{}}
	if _, e := a.manifest(`{"name":"bad"}`); e == nil || e.Kind != KindInvalidConfig || e.Message != `name "bad" is bad` {
		t.Errorf("%+v", e)
	}
	if _, e := a.manifest(`[`); e == nil || e.Kind != KindInvalidConfig {
		t.Errorf("a config that is not JSON: %+v", e)
	}
	if hooks := a.offered(""); len(hooks) != 1 || hooks[0] != Validate {
		t.Errorf("%v", hooks)
	}
	parent := `{"apiVersion":"example.com/v1","kind":"X","metadata":{"name":"x","namespace":"ns","generation":3}}`
	r, e := a.reconcile(request{parent: parent, now: "2026-01-01T00:00:00Z"})
	if e != nil {
		t.Fatal(e)
	}
	want := `{"apiVersion":"v1","kind":"Secret","metadata":{"annotations":{"kubeplug.io/create-only":"true"},"name":"s<&>"}}`
	if len(r.Children) != 1 || r.Children[0] != want {
		t.Errorf("children %v", r.Children)
	}
	if _, e := a.reconcile(request{parent: `{"metadata":{"name":"boom"}}`}); e == nil || e.Kind != KindFailed || !strings.Contains(e.Message, "unexpected end") {
		t.Errorf("any other error is failed with its message: %+v", e)
	}
	if _, e := a.reconcile(request{parent: `{`}); e == nil || e.Kind != KindInvalidInput {
		t.Errorf("a parent that is not JSON: %+v", e)
	}
	if f, e := a.finalize(request{parent: parent}); e != nil || !f.Done {
		t.Errorf("without Finalize, cleanup is done at once: %+v %+v", f, e)
	}
	if v, e := a.validate(admissionRequest{config: "{}"}); e != nil || v.Denied {
		t.Errorf("without Validate, every write is allowed: %+v %+v", v, e)
	}
	if m, e := a.mutate(admissionRequest{config: "{}"}); e != nil || m != nil {
		t.Errorf("without Mutate, nothing changes: %+v %+v", m, e)
	}
	same := `{"apiVersion":"example.com/v1"}`
	if out, e := a.convert([]string{same}, "example.com/v1", "{}"); e != nil || len(out) != 1 || out[0] != same {
		t.Errorf("%v %+v", out, e)
	}
	_, e = a.convert([]string{same}, "example.com/v2", "{}")
	if e == nil || e.Message != "bare converts no versions: cannot convert example.com/v1 to example.com/v2" {
		t.Errorf("%+v", e)
	}
}
