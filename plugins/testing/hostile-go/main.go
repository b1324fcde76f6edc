// hostile-go: a Go plugin that misbehaves on command, to prove the host
// contains a Go guest as it contains a Rust one (host/kubeplug/tests/go.rs).
//
// `spec.behave` of a `Hostile` (test.kubeplug.io/v1) parent picks what
// reconcile does:
//
//   - `ok`: one ConfigMap `<name>-ok`;
//   - `loop`: spins forever (the deadline stops it);
//   - `alloc`: allocates and keeps memory without bound (the memory cap);
//   - `panic`: panics with "hostile plugin asked to panic";
//   - `sleep`: sleeps an hour, which passes at once on the shim's virtual
//     clock, then answers as `ok`;
//   - `sleep-forever`: sleeps an hour at a time forever (the deadline);
//   - `block`: blocks forever with nothing left to run (Go's runtime
//     reports a deadlock and exits: a trap);
//   - `stderr`: writes to stderr, then answers as `ok`;
//   - `env`: a ConfigMap whose data holds what the environment, the
//     arguments, the files and the clock look like from inside;
//   - `error`: returns failed("hostile plugin asked to fail").
//
// The config `{"manifest": "panic"}` makes Manifest panic.
package main

import (
	"fmt"
	"os"
	"time"

	kubeplug "kubeplug/sdk"
)

type Config struct {
	Manifest string `json:"manifest"`
}

type Hostile struct{}

var configMap = kubeplug.ConfigMap

func (Hostile) Manifest(config *Config) (*kubeplug.Manifest, error) {
	if config.Manifest == "panic" {
		panic("hostile plugin asked to panic in manifest()")
	}
	return &kubeplug.Manifest{
		Name:     "hostile",
		Version:  "0.1.0",
		Parent:   kubeplug.Namespaced("test.kubeplug.io", "v1", "Hostile", "hostiles"),
		Children: []kubeplug.Resource{configMap},
	}, nil
}

// kept holds what `alloc` allocates, so none of it is collected.
var kept [][]byte

func (Hostile) Reconcile(ctx *kubeplug.Context[Config]) (*kubeplug.Response, error) {
	var parent struct {
		Spec struct {
			Behave string `json:"behave"`
		} `json:"spec"`
	}
	if err := ctx.ParentAs(&parent); err != nil {
		return nil, err
	}
	data := map[string]string{}
	switch parent.Spec.Behave {
	case "loop":
		for n := 0; ; n++ {
			_ = n
		}
	case "alloc":
		for {
			kept = append(kept, make([]byte, 1<<20))
		}
	case "panic":
		panic("hostile plugin asked to panic")
	case "sleep":
		time.Sleep(time.Hour)
	case "sleep-forever":
		for {
			time.Sleep(time.Hour)
		}
	case "block":
		select {}
	case "stderr":
		fmt.Fprintln(os.Stderr, "hostile plugin wrote to stderr")
	case "env":
		_, err := os.ReadFile("/etc/passwd")
		entries, dirErr := os.ReadDir(".")
		data["environ"] = fmt.Sprint(os.Environ())
		data["args"] = fmt.Sprint(os.Args)
		data["file"] = fmt.Sprint(err)
		data["dir"] = fmt.Sprint(len(entries), dirErr)
		data["year"] = fmt.Sprint(time.Now().UTC().Year())
	case "error":
		return nil, kubeplug.Failed("hostile plugin asked to fail")
	}
	child := map[string]any{
		"apiVersion": "v1",
		"kind":       "ConfigMap",
		"metadata":   map[string]any{"name": ctx.Name() + "-ok"},
		"data":       data,
	}
	return (&kubeplug.Response{}).Child(child), nil
}

func init() { kubeplug.Export[Config](Hostile{}) }

func main() {}
