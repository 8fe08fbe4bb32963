package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// file is one file of a materialized volume: its path inside the volume and its mode.
type file struct {
	path string
	data []byte
	mode os.FileMode
}

// materializeVolumes writes the content of every ConfigMap, Secret, downward-API and
// projected volume of a real pod under <podDir>/volumes/<name>/ (emptyDirs become empty
// directories), so that planMounts can bind them. Written once, before the first
// container starts; the kubelet's later refreshes (changed ConfigMaps, token rotation) are
// not done here, and the default token lives long enough for any test (1 h).
func (s *envSource) materializeVolumes(podDir string) error {
	for i := range s.pod.Spec.Volumes {
		v := &s.pod.Spec.Volumes[i]
		dir := filepath.Join(podDir, "volumes", v.Name)
		files, err := s.volumeFiles(v)
		if err != nil {
			return fmt.Errorf("volume %q: %w", v.Name, err)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		for _, f := range files {
			if err := writeVolumeFile(dir, f); err != nil {
				return fmt.Errorf("volume %q: %w", v.Name, err)
			}
		}
	}
	return nil
}

func writeVolumeFile(dir string, f file) error {
	rel := filepath.Clean("/" + f.path)
	if rel == "/" || strings.HasPrefix(f.path, "/") || slices.Contains(strings.Split(f.path, "/"), "..") {
		return fmt.Errorf("item path %q must be a relative path without '..'", f.path)
	}
	p := filepath.Join(dir, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(p, f.data, f.mode); err != nil {
		return err
	}
	return os.Chmod(p, f.mode) // WriteFile's mode is filtered by the umask
}

func (s *envSource) volumeFiles(v *corev1.Volume) ([]file, error) {
	switch {
	case v.EmptyDir != nil:
		return nil, nil
	case v.ConfigMap != nil:
		return s.configMapFiles(v.ConfigMap.Name, v.ConfigMap.Items, v.ConfigMap.Optional, mode(v.ConfigMap.DefaultMode, 0o644))
	case v.Secret != nil:
		return s.secretFiles(v.Secret.SecretName, v.Secret.Items, v.Secret.Optional, mode(v.Secret.DefaultMode, 0o644))
	case v.DownwardAPI != nil:
		return s.downwardFiles(v.DownwardAPI.Items, mode(v.DownwardAPI.DefaultMode, 0o644))
	case v.Projected != nil:
		return s.projectedFiles(v.Projected)
	}
	return nil, fmt.Errorf("this volume type is not supported by the test kubelet (emptyDir, configMap, secret, downwardAPI and projected are)")
}

func mode(m *int32, def os.FileMode) os.FileMode {
	if m == nil {
		return def
	}
	return os.FileMode(*m) & 0o777
}

// keyFiles maps a source's keys to files: every key by its own name, or only the listed
// items at their paths (a listed key that is missing is an error unless optional).
func keyFiles(kind, name string, data map[string][]byte, items []corev1.KeyToPath, optional *bool, def os.FileMode) ([]file, error) {
	var out []file
	if len(items) == 0 {
		for k, v := range data {
			out = append(out, file{path: k, data: v, mode: def})
		}
		return out, nil
	}
	for _, it := range items {
		v, ok := data[it.Key]
		if !ok {
			if isOptional(optional) {
				continue
			}
			return nil, fmt.Errorf("%s %q has no key %q", kind, name, it.Key)
		}
		out = append(out, file{path: it.Path, data: v, mode: mode(it.Mode, def)})
	}
	return out, nil
}

func (s *envSource) configMapFiles(name string, items []corev1.KeyToPath, optional *bool, def os.FileMode) ([]file, error) {
	cm, err := s.client.CoreV1().ConfigMaps(s.pod.Namespace).Get(s.ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) && isOptional(optional) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("configmap %q: %w", name, err)
	}
	data := map[string][]byte{}
	for k, v := range cm.Data {
		data[k] = []byte(v)
	}
	for k, v := range cm.BinaryData {
		data[k] = v
	}
	return keyFiles("configmap", name, data, items, optional, def)
}

func (s *envSource) secretFiles(name string, items []corev1.KeyToPath, optional *bool, def os.FileMode) ([]file, error) {
	sec, err := s.client.CoreV1().Secrets(s.pod.Namespace).Get(s.ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) && isOptional(optional) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("secret %q: %w", name, err)
	}
	return keyFiles("secret", name, sec.Data, items, optional, def)
}

func (s *envSource) downwardFiles(items []corev1.DownwardAPIVolumeFile, def os.FileMode) ([]file, error) {
	var out []file
	for _, it := range items {
		var val string
		var err error
		switch {
		case it.FieldRef != nil:
			val, err = s.fieldValue(it.FieldRef.FieldPath)
		case it.ResourceFieldRef != nil:
			val, err = resourceValue(containerNamed(s.pod, it.ResourceFieldRef.ContainerName), it.ResourceFieldRef)
		}
		if err != nil {
			return nil, fmt.Errorf("downwardAPI item %q: %w", it.Path, err)
		}
		out = append(out, file{path: it.Path, data: []byte(val), mode: mode(it.Mode, def)})
	}
	return out, nil
}

// projectedFiles merges its sources; a serviceAccountToken source is a TokenRequest for
// the pod's service account bound to the pod, as the kubelet asks for it.
func (s *envSource) projectedFiles(p *corev1.ProjectedVolumeSource) ([]file, error) {
	def := mode(p.DefaultMode, 0o644)
	var out []file
	for _, src := range p.Sources {
		var files []file
		var err error
		switch {
		case src.ConfigMap != nil:
			files, err = s.configMapFiles(src.ConfigMap.Name, src.ConfigMap.Items, src.ConfigMap.Optional, def)
		case src.Secret != nil:
			files, err = s.secretFiles(src.Secret.Name, src.Secret.Items, src.Secret.Optional, def)
		case src.DownwardAPI != nil:
			files, err = s.downwardFiles(src.DownwardAPI.Items, def)
		case src.ServiceAccountToken != nil:
			var tok string
			tok, err = s.serviceAccountToken(src.ServiceAccountToken)
			files = []file{{path: src.ServiceAccountToken.Path, data: []byte(tok), mode: def}}
		default:
			err = fmt.Errorf("a projected source other than configMap, secret, downwardAPI or serviceAccountToken")
		}
		if err != nil {
			return nil, err
		}
		out = append(out, files...)
	}
	return out, nil
}

func (s *envSource) serviceAccountToken(src *corev1.ServiceAccountTokenProjection) (string, error) {
	sa := s.pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	spec := authenticationv1.TokenRequestSpec{
		ExpirationSeconds: src.ExpirationSeconds,
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: s.pod.Name, UID: s.pod.UID},
	}
	if src.Audience != "" {
		spec.Audiences = []string{src.Audience}
	}
	tr, err := s.client.CoreV1().ServiceAccounts(s.pod.Namespace).CreateToken(s.ctx, sa,
		&authenticationv1.TokenRequest{Spec: spec}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token for service account %s/%s: %w", s.pod.Namespace, sa, err)
	}
	return tr.Status.Token, nil
}

func containerNamed(pod *corev1.Pod, name string) *corev1.Container {
	for _, list := range [][]corev1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
		for i := range list {
			if list[i].Name == name || name == "" {
				return &list[i]
			}
		}
	}
	return &corev1.Container{}
}
