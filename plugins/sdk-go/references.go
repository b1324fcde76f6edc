package kubeplug

// Reference is an object (or objects) a parent names: the host looks them
// up in the parent's namespace and hands those it finds in the request's
// related objects.
type Reference struct {
	Resource Resource
	// Namespace: nil means the parent's, the only one a namespaced parent
	// may name.
	Namespace *string
	// Name selects the object with this name; when empty, Labels selects
	// every object whose labels hold all these pairs (at least one).
	Name   string
	Labels [][2]string
}

// Named is the object of resource named name.
func Named(resource Resource, name string) Reference {
	return Reference{Resource: resource, Name: name}
}

// Labelled are the objects of resource whose labels hold every pair.
func Labelled(resource Resource, labels ...[2]string) Reference {
	return Reference{Resource: resource, Labels: labels}
}

// InNamespace looks in namespace (a cluster-scoped parent's references).
func (r Reference) InNamespace(namespace string) Reference {
	r.Namespace = &namespace
	return r
}
