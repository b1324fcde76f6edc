package main

import (
	"encoding/json"
	"fmt"
	"sort"

	kubeplug "kubeplug/sdk"
)

// DatabaseStatus is `Database.status`, written in the Rust plugin's field
// order.
type DatabaseStatus struct {
	// Phase is Pending, Creating, Running or Failed.
	Phase string `json:"phase"`
	// Pods are the names of the database's pods, sorted.
	Pods []string `json:"pods"`
	// Nodes are the same names under the seeds' field name.
	Nodes []string `json:"nodes"`
	// Replicas are the pods that exist (for the scale subresource).
	Replicas      int32  `json:"replicas"`
	ReadyReplicas int32  `json:"readyReplicas"`
	Selector      string `json:"selector"`
	// ObservedGeneration is the parent's generation this status is for.
	ObservedGeneration *int64               `json:"observedGeneration,omitempty"`
	Conditions         []kubeplug.Condition `json:"conditions"`
}

// podView is the part of a related Pod the status reads.
type podView struct {
	Metadata kubeplug.Meta `json:"metadata"`
	Status   *struct {
		Phase      *string `json:"phase"`
		Conditions *[]struct {
			Type   *string `json:"type"`
			Status *string `json:"status"`
		} `json:"conditions"`
	} `json:"status"`
}

func (p *podView) ready() bool {
	if p.Status == nil || p.Status.Conditions == nil {
		return false
	}
	for _, c := range *p.Status.Conditions {
		if c.Type != nil && *c.Type == "Ready" && c.Status != nil && *c.Status == "True" {
			return true
		}
	}
	return false
}

func (p *podView) phase() string {
	if p.Status == nil || p.Status.Phase == nil {
		return "Pending"
	}
	return *p.Status.Phase
}

// previousConditions are the conditions of the parent's status when the
// whole status reads as a DatabaseStatus (as the Rust plugin reads it),
// else none.
func previousConditions(status json.RawMessage) []kubeplug.Condition {
	var fields map[string]json.RawMessage
	if status == nil || json.Unmarshal(status, &fields) != nil || fields == nil {
		return nil
	}
	var required struct {
		Phase         string
		Pods, Nodes   []string
		Replicas      int32
		ReadyReplicas int32
		Selector      string
	}
	for key, target := range map[string]any{
		"phase": &required.Phase, "pods": &required.Pods, "nodes": &required.Nodes,
		"replicas": &required.Replicas, "readyReplicas": &required.ReadyReplicas, "selector": &required.Selector,
	} {
		text, ok := fields[key]
		if !ok || string(text) == "null" || json.Unmarshal(text, target) != nil {
			return nil
		}
	}
	if text, ok := fields["observedGeneration"]; ok {
		var g *int64
		if json.Unmarshal(text, &g) != nil {
			return nil
		}
	}
	var conditions []kubeplug.Condition
	if text, ok := fields["conditions"]; ok && json.Unmarshal(text, &conditions) != nil {
		return nil
	}
	return conditions
}

func status(ctx *kubeplug.Context[Config], db *Database) DatabaseStatus {
	name := ctx.Name()
	var pods []podView
	for _, p := range kubeplug.As[podView](ctx.RelatedOf(kubeplug.Pod.APIVersion(), kubeplug.Pod.Kind)) {
		if p.Metadata.DeletionTimestamp == nil {
			pods = append(pods, p)
		}
	}
	sort.SliceStable(pods, func(i, j int) bool {
		a, b := pods[i].Metadata.Name, pods[j].Metadata.Name
		if a == nil || b == nil {
			return a == nil && b != nil
		}
		return *a < *b
	})
	var ready int32
	failed := false
	for i := range pods {
		if pods[i].ready() {
			ready++
		}
		failed = failed || pods[i].phase() == "Failed"
	}
	_, sts := ctx.ObservedNamed(kubeplug.StatefulSet.APIVersion(), kubeplug.StatefulSet.Kind, name)
	want := db.Spec.Replicas

	var phase, reason, message string
	switch {
	case failed:
		phase, reason, message = "Failed", "PodFailed", "a database pod has failed"
	case !sts:
		phase, reason, message = "Pending", "Provisioning", "waiting for the StatefulSet"
	case ready == want && int32(len(pods)) == want:
		phase, reason, message = "Running", "AllReplicasReady", fmt.Sprintf("%d/%d replicas ready", ready, want)
	default:
		phase, reason, message = "Creating", "ReplicasNotReady", fmt.Sprintf("%d/%d replicas ready", ready, want)
	}

	conditions := previousConditions(ctx.Status())
	if now, ok := kubeplug.ParseTime(ctx.Now); ok {
		readyStatus := "False"
		if phase == "Running" {
			readyStatus = "True"
		}
		conditions = kubeplug.SetCondition(conditions, kubeplug.Condition{
			Type: "Ready", Status: readyStatus, Reason: reason, Message: message,
			LastTransitionTime: now, ObservedGeneration: ctx.Generation(),
		})
	}
	if conditions == nil {
		conditions = []kubeplug.Condition{}
	}

	names := []string{}
	for _, p := range pods {
		if p.Metadata.Name != nil {
			names = append(names, *p.Metadata.Name)
		}
	}
	return DatabaseStatus{
		Phase:              phase,
		Pods:               names,
		Nodes:              names,
		Replicas:           int32(len(pods)),
		ReadyReplicas:      ready,
		Selector:           fmt.Sprintf("%s=database,%s=%s", nameLabel, instanceLabel, name),
		ObservedGeneration: ctx.Generation(),
		Conditions:         conditions,
	}
}
