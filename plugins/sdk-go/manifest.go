package kubeplug

// Resource is a Kubernetes resource type, as the API server names it.
type Resource struct {
	// Group is empty for the core group (Pods, Services, Secrets).
	Group      string
	Version    string
	Kind       string
	Plural     string
	Namespaced bool
}

// Namespaced is a namespaced resource type.
func Namespaced(group, version, kind, plural string) Resource {
	return Resource{group, version, kind, plural, true}
}

// ClusterScoped is a cluster-scoped resource type.
func ClusterScoped(group, version, kind, plural string) Resource {
	return Resource{group, version, kind, plural, false}
}

// APIVersion is the resource's apiVersion: `v1`, `apps/v1`.
func (r Resource) APIVersion() string {
	if r.Group == "" {
		return r.Version
	}
	return r.Group + "/" + r.Version
}

// Kinds plugins commonly own or read.
var (
	Pod         = Namespaced("", "v1", "Pod", "pods")
	Service     = Namespaced("", "v1", "Service", "services")
	Secret      = Namespaced("", "v1", "Secret", "secrets")
	ConfigMap   = Namespaced("", "v1", "ConfigMap", "configmaps")
	StatefulSet = Namespaced("apps", "v1", "StatefulSet", "statefulsets")
	Deployment  = Namespaced("apps", "v1", "Deployment", "deployments")
)

// Mode is how the plugin acts on its parents.
type Mode int

const (
	// Composite: owns children and writes status.
	Composite Mode = iota
	// Decorator: patches the parent's labels and annotations, and may
	// attach children to it.
	Decorator
)

// LabelValue is where a selector value comes from: a literal, or the
// parent's name.
type LabelValue struct {
	Literal    string
	ParentName bool
}

// Literal is a fixed selector value.
func Literal(value string) LabelValue { return LabelValue{Literal: value} }

// ParentName is the parent's metadata.name as a selector value.
func ParentName() LabelValue { return LabelValue{ParentName: true} }

// LabelMatch is one key=value entry of a label selector.
type LabelMatch struct {
	Key   string
	Value LabelValue
}

// Related are objects to observe (not own), selected by labels.
type Related struct {
	Resource    Resource
	MatchLabels []LabelMatch
}

// Webhook is a webhook a plugin offers.
type Webhook int

const (
	Validate Webhook = iota
	Mutate
	Convert
)

// Manifest is what a plugin is; see wit/plugin.wit for every field.
type Manifest struct {
	Name          string
	Version       string
	Parent        Resource
	Mode          Mode
	Children      []Resource
	Related       []Related
	Namespaces    []string
	Finalizer     *string
	ResyncSeconds *uint32
	// MetadataOnly are kinds read only as apiVersion, kind and metadata
	// (related kinds, a decorator's parent): the host caches less.
	MetadataOnly []Resource
	// Webhooks the plugin offers (each must be granted by the platform).
	Webhooks []Webhook
	// References are the kinds its parents may name (see [Referencer]).
	References []Resource
}
