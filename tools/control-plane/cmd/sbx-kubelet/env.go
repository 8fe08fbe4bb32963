package main

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// envList is an ordered environment in which a later value of a name replaces the earlier
// one, as the kubelet builds a container's env: service variables, envFrom, then env.
type envList struct {
	names  []string
	values map[string]string
}

func newEnvList() *envList { return &envList{values: map[string]string{}} }

func (e *envList) set(k, v string) {
	if _, ok := e.values[k]; !ok {
		e.names = append(e.names, k)
	}
	e.values[k] = v
}

func (e *envList) lookup(k string) (string, bool) { v, ok := e.values[k]; return v, ok }

func (e *envList) pairs() []string {
	out := make([]string, 0, len(e.names))
	for _, k := range e.names {
		out = append(out, k+"="+e.values[k])
	}
	return out
}

// expandVars replaces $(NAME) with NAME's value where lookup knows it and leaves it as
// written where it does not; $$ stands for a literal $ (so $$(NAME) stays literal).
// These are the Kubernetes rules for command, args and env values.
func expandVars(s string, lookup func(string) (string, bool)) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			ref := s[i : i+3+end]
			if v, ok := lookup(s[i+2 : i+2+end]); ok {
				b.WriteString(v)
			} else {
				b.WriteString(ref)
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}

// envSource reads the objects env values come from, in the pod's namespace.
type envSource struct {
	ctx    context.Context
	client kubernetes.Interface
	pod    *corev1.Pod
	podIP  string
	hostIP string
	// apiPort is what KUBERNETES_SERVICE_PORT says; the host is 127.0.0.1, forwarded into
	// every pod to the API server (see podNetns.forwardLoopback).
	apiPort int
}

// resolveEnv is the container's environment: the defaults every container here gets, the
// in-cluster API server variables, envFrom, then env with valueFrom resolved and $(VAR)
// references to earlier variables expanded.
func (s *envSource) resolveEnv(c *corev1.Container) (*envList, error) {
	env := newEnvList()
	for _, kv := range containerEnv(s.pod, &corev1.Container{}) {
		k, v, _ := strings.Cut(kv, "=")
		env.set(k, v)
	}
	if s.apiPort > 0 {
		port := fmt.Sprint(s.apiPort)
		env.set("KUBERNETES_SERVICE_HOST", "127.0.0.1")
		env.set("KUBERNETES_SERVICE_PORT", port)
		env.set("KUBERNETES_SERVICE_PORT_HTTPS", port)
		env.set("KUBERNETES_PORT", "tcp://127.0.0.1:"+port)
	}
	for _, from := range c.EnvFrom {
		data, err := s.envFromData(from)
		if err != nil {
			return nil, fmt.Errorf("container %q envFrom: %w", c.Name, err)
		}
		for k, v := range data {
			env.set(from.Prefix+k, v)
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			env.set(e.Name, expandVars(e.Value, env.lookup))
			continue
		}
		v, ok, err := s.valueFrom(c, e.ValueFrom)
		if err != nil {
			return nil, fmt.Errorf("container %q env %s: %w", c.Name, e.Name, err)
		}
		if ok {
			env.set(e.Name, v)
		}
	}
	return env, nil
}

func (s *envSource) envFromData(from corev1.EnvFromSource) (map[string]string, error) {
	switch {
	case from.ConfigMapRef != nil:
		cm, err := s.client.CoreV1().ConfigMaps(s.pod.Namespace).Get(s.ctx, from.ConfigMapRef.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) && isOptional(from.ConfigMapRef.Optional) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("configmap %q: %w", from.ConfigMapRef.Name, err)
		}
		return cm.Data, nil
	case from.SecretRef != nil:
		sec, err := s.client.CoreV1().Secrets(s.pod.Namespace).Get(s.ctx, from.SecretRef.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) && isOptional(from.SecretRef.Optional) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("secret %q: %w", from.SecretRef.Name, err)
		}
		out := map[string]string{}
		for k, v := range sec.Data {
			out[k] = string(v)
		}
		return out, nil
	}
	return nil, nil
}

// valueFrom answers the value and whether the variable is set at all (an optional key
// that is missing leaves it unset, as the kubelet does).
func (s *envSource) valueFrom(c *corev1.Container, v *corev1.EnvVarSource) (string, bool, error) {
	switch {
	case v.FieldRef != nil:
		val, err := s.fieldValue(v.FieldRef.FieldPath)
		return val, err == nil, err
	case v.ResourceFieldRef != nil:
		val, err := resourceValue(c, v.ResourceFieldRef)
		return val, err == nil, err
	case v.ConfigMapKeyRef != nil:
		ref := v.ConfigMapKeyRef
		cm, err := s.client.CoreV1().ConfigMaps(s.pod.Namespace).Get(s.ctx, ref.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) && isOptional(ref.Optional) {
			return "", false, nil
		}
		if err != nil {
			return "", false, fmt.Errorf("configmap %q: %w", ref.Name, err)
		}
		if val, ok := cm.Data[ref.Key]; ok {
			return val, true, nil
		}
		if val, ok := cm.BinaryData[ref.Key]; ok {
			return string(val), true, nil
		}
		if isOptional(ref.Optional) {
			return "", false, nil
		}
		return "", false, fmt.Errorf("configmap %q has no key %q", ref.Name, ref.Key)
	case v.SecretKeyRef != nil:
		ref := v.SecretKeyRef
		sec, err := s.client.CoreV1().Secrets(s.pod.Namespace).Get(s.ctx, ref.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) && isOptional(ref.Optional) {
			return "", false, nil
		}
		if err != nil {
			return "", false, fmt.Errorf("secret %q: %w", ref.Name, err)
		}
		if val, ok := sec.Data[ref.Key]; ok {
			return string(val), true, nil
		}
		if isOptional(ref.Optional) {
			return "", false, nil
		}
		return "", false, fmt.Errorf("secret %q has no key %q", ref.Name, ref.Key)
	}
	return "", false, fmt.Errorf("valueFrom names no source")
}

// fieldValue is the downward API: env fieldRef and downwardAPI volume items.
func (s *envSource) fieldValue(path string) (string, error) {
	p := s.pod
	switch path {
	case "metadata.name":
		return p.Name, nil
	case "metadata.namespace":
		return p.Namespace, nil
	case "metadata.uid":
		return string(p.UID), nil
	case "spec.nodeName":
		return p.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return p.Spec.ServiceAccountName, nil
	case "status.podIP", "status.podIPs":
		return s.podIP, nil
	case "status.hostIP", "status.hostIPs":
		return s.hostIP, nil
	case "metadata.labels":
		return formatMap(p.Labels), nil
	case "metadata.annotations":
		return formatMap(p.Annotations), nil
	}
	for prefix, m := range map[string]map[string]string{"metadata.labels": p.Labels, "metadata.annotations": p.Annotations} {
		if key, ok := strings.CutPrefix(path, prefix+"['"); ok && strings.HasSuffix(key, "']") {
			return m[strings.TrimSuffix(key, "']")], nil
		}
	}
	return "", fmt.Errorf("fieldRef %q is not supported by the test kubelet", path)
}

func formatMap(m map[string]string) string {
	lines := make([]string, 0, len(m))
	for k, v := range m {
		lines = append(lines, fmt.Sprintf("%s=%q", k, v))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// resourceValue reads a container's limit (falling back to its request), rounded up to the
// divisor as the kubelet does; an unset cpu/memory limit has no node-capacity fallback here.
func resourceValue(c *corev1.Container, ref *corev1.ResourceFieldSelector) (string, error) {
	kind, name, ok := strings.Cut(ref.Resource, ".")
	if !ok {
		return "", fmt.Errorf("resourceFieldRef %q is not limits.X or requests.X", ref.Resource)
	}
	list := c.Resources.Limits
	if kind == "requests" || list == nil {
		list = c.Resources.Requests
	}
	q, ok := list[corev1.ResourceName(name)]
	if !ok {
		return "0", nil
	}
	div := ref.Divisor
	if div.IsZero() {
		if name == "cpu" {
			return fmt.Sprint(int64(math.Ceil(float64(q.MilliValue()) / 1000))), nil
		}
		return fmt.Sprint(q.Value()), nil
	}
	return fmt.Sprint(int64(math.Ceil(float64(q.MilliValue()) / float64(div.MilliValue())))), nil
}

func isOptional(b *bool) bool { return b != nil && *b }
