// database: a `Database` (example.com/v1) becomes a headless Service, a
// StatefulSet and a credentials Secret; its status reports the phase and
// the database's pods. A Go port of plugins/database, answering as it does
// on its fixtures.
//
// The Secret is create-only: the host creates it once and never re-applies
// it, so the password never rotates. Writes of Databases are validated
// (admission.go) and converted between example.com/v1 and example.com/v2
// (convert.go).
package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"

	kubeplug "kubeplug/sdk"
)

// Label keys that tie a database's pods to it. The selector of a
// StatefulSet is immutable, so it holds only what never changes.
const (
	nameLabel      = "app.kubernetes.io/name"
	instanceLabel  = "app.kubernetes.io/instance"
	managedByLabel = "app.kubernetes.io/managed-by"
	engineLabel    = "example.com/engine"
	version        = "0.1.0"
)

// DatabasePlugin is the plugin.
type DatabasePlugin struct{}

// Config is the plugin's configuration (`config:` in its settings file).
type Config struct {
	// ImageRegistry: pull the engines' images from this registry (a
	// mirror) instead of Docker Hub.
	ImageRegistry *string
	// EngineRegistries: one engine's registry, in place of ImageRegistry.
	EngineRegistries map[Engine]string
}

// UnmarshalJSON reads the configuration as the Rust plugin does: unknown
// fields refused, engines by name.
func (c *Config) UnmarshalJSON(text []byte) error {
	if err := kubeplug.UnknownField(text, "imageRegistry", "engineRegistries"); err != nil {
		return err
	}
	var raw struct {
		ImageRegistry    *string           `json:"imageRegistry"`
		EngineRegistries map[string]string `json:"engineRegistries"`
	}
	if err := json.Unmarshal(text, &raw); err != nil {
		return err
	}
	c.ImageRegistry = raw.ImageRegistry
	c.EngineRegistries = map[Engine]string{}
	for name, registry := range raw.EngineRegistries {
		engine, ok := engineNamed(name)
		if !ok {
			return fmt.Errorf("unknown variant `%s`, expected one of `mysql`, `postgresql`, `mongodb`", name)
		}
		c.EngineRegistries[engine] = registry
	}
	return nil
}

func (c *Config) validate() error {
	type entry struct{ field, registry string }
	var registries []entry
	if c.ImageRegistry != nil {
		registries = append(registries, entry{"imageRegistry", *c.ImageRegistry})
	}
	for _, e := range engines {
		if r, ok := c.EngineRegistries[e]; ok {
			registries = append(registries, entry{"engineRegistries." + e.String(), r})
		}
	}
	for _, r := range registries {
		valid := r.registry != "" && !strings.HasSuffix(r.registry, "/")
		for i := 0; valid && i < len(r.registry); i++ {
			b := r.registry[i]
			valid = b < 0x80 && (b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || strings.IndexByte(".-_/:", b) >= 0)
		}
		if !valid {
			return kubeplug.InvalidConfig("%s must be a registry host and path without a trailing slash, got %s", r.field, quote(r.registry))
		}
	}
	return nil
}

// image is the image of engine at version, from the configured registry.
func (c *Config) image(engine Engine, version string) string {
	if r, ok := c.EngineRegistries[engine]; ok {
		return fmt.Sprintf("%s/%s:%s", r, engine.Image(), version)
	}
	if c.ImageRegistry != nil {
		return fmt.Sprintf("%s/%s:%s", *c.ImageRegistry, engine.Image(), version)
	}
	return fmt.Sprintf("%s:%s", engine.Image(), version)
}

func selectorLabels(name string) map[string]string {
	return map[string]string{nameLabel: "database", instanceLabel: name}
}

func labels(name string, engine Engine) map[string]string {
	l := selectorLabels(name)
	l[managedByLabel] = "kubeplug"
	l[engineLabel] = engine.String()
	return l
}

type object = map[string]any

func meta(name, namespace string, labels map[string]string) object {
	return object{"name": name, "namespace": namespace, "labels": labels}
}

func secretName(name string) string { return name + "-credentials" }

// password is 24 characters from the host's entropy.
func password(entropy []byte) (string, error) {
	if len(entropy) < 16 {
		return "", kubeplug.Failed("host supplied too little entropy")
	}
	const alphabet = "abcdefghijkmnpqrstuvwxyzACDEFGHJKLMNPQRTUVWXY345679"
	out := make([]byte, 0, 24)
	for i := 0; i < len(entropy) && i < 24; i++ {
		out = append(out, alphabet[int(entropy[i])%len(alphabet)])
	}
	return string(out), nil
}

// secretData is the part of an observed Secret the plugin keeps: its data,
// which must read as base64 (or the Secret counts as absent).
func secretData(text json.RawMessage) (map[string]string, bool) {
	var s struct {
		Data *map[string]string `json:"data"`
	}
	if json.Unmarshal(text, &s) != nil {
		return nil, false
	}
	if s.Data == nil {
		return nil, true
	}
	data := map[string]string{}
	for k, v := range *s.Data {
		raw, err := base64.StdEncoding.DecodeString(v)
		if err != nil {
			return nil, false
		}
		data[k] = base64.StdEncoding.EncodeToString(raw)
	}
	return data, true
}

func secret(ctx *kubeplug.Context[Config], db *Database) (object, bool, error) {
	name := secretName(ctx.Name())
	s := object{
		"apiVersion": "v1",
		"kind":       "Secret",
		"metadata":   meta(name, ctx.Namespace(), labels(ctx.Name(), db.Spec.Engine)),
		"type":       "Opaque",
	}
	if existing, ok := ctx.ObservedNamed(kubeplug.Secret.APIVersion(), kubeplug.Secret.Kind, name); ok {
		if data, ok := secretData(existing); ok {
			// Keep what is there; return only what we own.
			if data != nil {
				s["data"] = data
			}
			return s, false, nil
		}
	}
	pw, err := password(ctx.Entropy)
	if err != nil {
		return nil, false, err
	}
	s["data"] = map[string]string{
		"username": base64.StdEncoding.EncodeToString([]byte(db.Spec.Engine.User())),
		"password": base64.StdEncoding.EncodeToString([]byte(pw)),
	}
	return s, true, nil
}

func service(ctx *kubeplug.Context[Config], db *Database) object {
	engine := db.Spec.Engine
	return object{
		"apiVersion": "v1",
		"kind":       "Service",
		"metadata":   meta(ctx.Name(), ctx.Namespace(), labels(ctx.Name(), engine)),
		"spec": object{
			"clusterIP": "None",
			"selector":  selectorLabels(ctx.Name()),
			"ports": []object{{
				"name":       engine.String(),
				"port":       engine.Port(),
				"targetPort": engine.String(),
			}},
			"publishNotReadyAddresses": true,
		},
	}
}

func statefulSet(ctx *kubeplug.Context[Config], db *Database) object {
	engine := db.Spec.Engine
	l := labels(ctx.Name(), engine)
	env := []object{}
	for _, e := range engine.CredentialEnv() {
		env = append(env, object{
			"name":      e[0],
			"valueFrom": object{"secretKeyRef": object{"name": secretName(ctx.Name()), "key": e[1]}},
		})
	}
	container := object{
		"name":           engine.String(),
		"image":          ctx.Config.image(engine, db.Spec.Version),
		"ports":          []object{{"name": engine.String(), "containerPort": engine.Port()}},
		"env":            env,
		"readinessProbe": object{"tcpSocket": object{"port": engine.String()}, "periodSeconds": 10},
		"volumeMounts":   []object{{"name": "data", "mountPath": engine.DataDir()}},
	}
	return object{
		"apiVersion": "apps/v1",
		"kind":       "StatefulSet",
		"metadata":   meta(ctx.Name(), ctx.Namespace(), l),
		"spec": object{
			"serviceName": ctx.Name(),
			"replicas":    db.Spec.Replicas,
			"selector":    object{"matchLabels": selectorLabels(ctx.Name())},
			"template": object{
				"metadata": object{"labels": l},
				"spec": object{
					"containers": []object{container},
					// Storage classes differ per cluster; data lives in an
					// emptyDir until the spec grows a storage field.
					"volumes": []object{{"name": "data", "emptyDir": object{}}},
				},
			},
		},
	}
}

// Manifest describes the plugin.
func (DatabasePlugin) Manifest(config *Config) (*kubeplug.Manifest, error) {
	if err := config.validate(); err != nil {
		return nil, err
	}
	return &kubeplug.Manifest{
		Name:     "database",
		Version:  version,
		Parent:   kubeplug.Namespaced("example.com", "v1", "Database", "databases"),
		Mode:     kubeplug.Composite,
		Children: []kubeplug.Resource{kubeplug.StatefulSet, kubeplug.Service, kubeplug.Secret},
		Related: []kubeplug.Related{{
			Resource: kubeplug.Pod,
			MatchLabels: []kubeplug.LabelMatch{
				{Key: nameLabel, Value: kubeplug.Literal("database")},
				{Key: instanceLabel, Value: kubeplug.ParentName()},
			},
		}},
		// Its checks and the v1 <-> v2 conversion.
		Webhooks: []kubeplug.Webhook{kubeplug.Validate, kubeplug.Convert},
	}, nil
}

// Reconcile decides the children and status of one Database.
func (DatabasePlugin) Reconcile(ctx *kubeplug.Context[Config]) (*kubeplug.Response, error) {
	db, err := readDatabase(ctx.Parent)
	if err != nil {
		return nil, err
	}
	if err := db.Spec.Validate(); err != nil {
		return nil, err
	}
	s, created, err := secret(ctx, db)
	if err != nil {
		return nil, err
	}
	response := (&kubeplug.Response{}).
		Child(service(ctx, db)).
		Child(statefulSet(ctx, db)).
		CreateOnlyChild(s).
		Status(status(ctx, db))
	if created {
		response.Event(kubeplug.Normal("CredentialsCreated", "created Secret "+secretName(ctx.Name())))
	}
	return response, nil
}

func init() { kubeplug.Export[Config](DatabasePlugin{}) }

func main() {}
