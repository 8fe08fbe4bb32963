package main

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// defaultWritablePaths are private to each pod even when the pod spec mounts nothing there:
// a container always has its own /tmp, and sandbox workloads expect /workspace.
var defaultWritablePaths = []string{"/tmp", "/workspace"}

// skippedVolume reports volumes whose content the kubelet would generate (tokens,
// ConfigMaps, Secrets). The stand-in does not materialise them; mounting an empty
// directory in their place would mislead a test more than leaving the path absent.
func skippedVolume(v *corev1.Volume) bool {
	return v.Projected != nil || v.Secret != nil || v.ConfigMap != nil || v.DownwardAPI != nil
}

// mount is one writable (or read-only) bind of a per-pod directory into the sandbox.
type mount struct {
	source   string
	target   string
	readOnly bool
}

// planMounts decides which per-pod directories appear where in a container: every
// volume mount of the container (emptyDir and any other volume type become a directory
// under the pod's dir, shared by the pod's containers), then /tmp and /workspace unless a
// volume already covers them. Sorted by depth so a parent is bound before its children.
func planMounts(pod *corev1.Pod, c *corev1.Container, podDir string) ([]mount, error) {
	volumes := map[string]*corev1.Volume{}
	for i := range pod.Spec.Volumes {
		volumes[pod.Spec.Volumes[i].Name] = &pod.Spec.Volumes[i]
	}
	var out []mount
	covered := map[string]bool{}
	for _, vm := range c.VolumeMounts {
		v, ok := volumes[vm.Name]
		if !ok {
			return nil, fmt.Errorf("container %q mounts volume %q, which the pod does not define", c.Name, vm.Name)
		}
		if skippedVolume(v) {
			continue
		}
		target := path.Clean(vm.MountPath)
		if !path.IsAbs(target) || target == "/" {
			return nil, fmt.Errorf("container %q mount path %q must be an absolute path other than /", c.Name, vm.MountPath)
		}
		src := filepath.Join(podDir, "volumes", vm.Name, filepath.Clean("/"+vm.SubPath))
		out = append(out, mount{source: src, target: target, readOnly: vm.ReadOnly})
		covered[target] = true
	}
	for _, p := range defaultWritablePaths {
		if !covered[p] {
			out = append(out, mount{source: filepath.Join(podDir, "paths", strings.TrimPrefix(p, "/")), target: p})
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		return strings.Count(out[i].target, "/") < strings.Count(out[j].target, "/")
	})
	for _, m := range out {
		if err := os.MkdirAll(m.source, 0o755); err != nil {
			return nil, err
		}
		if err := checkTargetCreatable(m.target); err != nil {
			return nil, fmt.Errorf("container %q: %w", c.Name, err)
		}
	}
	return out, nil
}

// checkTargetCreatable fails early with a clear message when a mount target would sit
// inside a host directory that is bound read-only and does not already contain it:
// bubblewrap cannot create the mount point there.
func checkTargetCreatable(target string) error {
	parts := strings.Split(strings.TrimPrefix(target, "/"), "/")
	if len(parts) == 1 {
		return nil // top level: created on the sandbox's own root tmpfs
	}
	if isDefaultPath("/" + parts[0]) {
		return nil
	}
	if _, err := os.Lstat("/" + parts[0]); err != nil {
		return nil // top-level dir absent on the host: lives on the sandbox's tmpfs root
	}
	if _, err := os.Stat(target); err != nil {
		return fmt.Errorf("mount path %s is inside the host's read-only /%s and does not exist there; "+
			"use a top-level path (e.g. /data) or /workspace/..., /tmp/...", target, parts[0])
	}
	return nil
}

func isDefaultPath(p string) bool {
	for _, d := range defaultWritablePaths {
		if d == p {
			return true
		}
	}
	return false
}

// bwrapArgs builds the bubblewrap command line of a container's main process: the host's
// top-level entries bound read-only (so the sandbox sees the host's tools), fresh /proc
// and /dev, the planned per-pod mounts, and the container's environment and working
// directory. Execs do not get a sandbox of their own: they join this one (container.go).
func bwrapArgs(pod *corev1.Pod, c *corev1.Container, mounts []mount, cmd []string) ([]string, error) {
	hidden := map[string]bool{"/proc": true, "/dev": true}
	for _, m := range mounts {
		top := "/" + strings.Split(strings.TrimPrefix(m.target, "/"), "/")[0]
		if top == m.target {
			hidden[top] = true
		}
	}
	args := []string{"--die-with-parent", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
		"--hostname", hostname(pod.Name), "--proc", "/proc", "--dev", "/dev"}
	entries, err := os.ReadDir("/")
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		p := "/" + e.Name()
		if hidden[p] {
			continue
		}
		if e.Type()&os.ModeSymlink != 0 {
			dest, err := os.Readlink(p)
			if err != nil {
				return nil, err
			}
			args = append(args, "--symlink", dest, p)
			continue
		}
		args = append(args, "--ro-bind", p, p)
	}
	for _, m := range mounts {
		flag := "--bind"
		if m.readOnly {
			flag = "--ro-bind"
		}
		args = append(args, flag, m.source, m.target)
	}
	args = append(args, "--chdir", workDir(c), "--clearenv")
	for _, kv := range containerEnv(pod, c) {
		k, v, _ := strings.Cut(kv, "=")
		args = append(args, "--setenv", k, v)
	}
	args = append(args, "--")
	return append(args, cmd...), nil
}

func workDir(c *corev1.Container) string {
	if c.WorkingDir == "" {
		return "/"
	}
	return c.WorkingDir
}

// containerEnv is the environment of every process of the container, main process and
// execs alike: a fixed PATH, HOSTNAME and HOME, then the container's literal env values
// (valueFrom is not resolved here).
func containerEnv(pod *corev1.Pod, c *corev1.Container) []string {
	env := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOSTNAME=" + hostname(pod.Name), "HOME=/root"}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			env = append(env, e.Name+"="+e.Value)
		}
	}
	return env
}

func hostname(podName string) string {
	if len(podName) > 63 {
		return podName[:63]
	}
	return podName
}
