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

// generatedVolume reports volumes whose content the kubelet generates (tokens, ConfigMaps,
// Secrets). For sandbox pods (kwok-played) they are not materialised: mounting an empty
// directory in their place would mislead a test more than leaving the path absent. Pods on
// the real nodes get them written by materializeVolumes.
func generatedVolume(v *corev1.Volume) bool {
	return v.Projected != nil || v.Secret != nil || v.ConfigMap != nil || v.DownwardAPI != nil
}

// mount is one writable (or read-only) bind of a per-pod directory into the sandbox.
type mount struct {
	source   string
	target   string
	readOnly bool
}

// planMounts decides which per-pod directories appear where in a container: every
// volume mount of the container (under the pod's dir, shared by the pod's containers;
// generated volumes only when materialized), then /tmp and /workspace unless a volume
// already covers them. Sorted by depth so a parent is bound before its children. Targets
// are resolved through the host's symlinks (/var/run -> /run), as bubblewrap follows them.
func planMounts(pod *corev1.Pod, c *corev1.Container, podDir string, materialized bool) ([]mount, error) {
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
		if generatedVolume(v) && !materialized {
			continue
		}
		target := path.Clean(vm.MountPath)
		if !path.IsAbs(target) || target == "/" {
			return nil, fmt.Errorf("container %q mount path %q must be an absolute path other than /", c.Name, vm.MountPath)
		}
		target = resolveHostSymlinks(target)
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
		if st, err := os.Stat(m.source); err == nil && !st.IsDir() {
			continue // a subPath naming a file of the volume
		}
		if err := os.MkdirAll(m.source, 0o755); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// resolveHostSymlinks rewrites the longest prefix of target that exists on the host to
// its real path, keeping the rest: the sandbox binds the host's directories, so its
// symlinks resolve the same way.
func resolveHostSymlinks(target string) string {
	for p := target; p != "/"; p = path.Dir(p) {
		if _, err := os.Lstat(p); err != nil {
			continue
		}
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			return target
		}
		return path.Join(real, strings.TrimPrefix(target, p))
	}
	return target
}

// planShadows answers the host directories that must be replaced, inside the sandbox
// only, by a tmpfs holding binds of their entries: a mount target whose parent is missing
// in a host directory that is bound read-only (/opt/sbx, /etc/sbx) cannot get its mount
// point created there. The deepest existing host ancestor of such a target is shadowed;
// targets under another mount, or whose top-level directory is missing on the host (it is
// then on the sandbox's own root tmpfs), need none. The host is never written.
func planShadows(mounts []mount) []string {
	seen := map[string]bool{}
	var out []string
	for _, m := range mounts {
		if underOtherMount(m.target, mounts) {
			continue
		}
		if _, err := os.Lstat(m.target); err == nil {
			continue // the mount point exists: binding over it needs no write
		}
		anc := path.Dir(m.target)
		for anc != "/" {
			if _, err := os.Lstat(anc); err == nil {
				break
			}
			anc = path.Dir(anc)
		}
		if anc == "/" || seen[anc] {
			continue
		}
		seen[anc] = true
		out = append(out, anc)
	}
	sort.Slice(out, func(i, j int) bool { return strings.Count(out[i], "/") < strings.Count(out[j], "/") })
	return out
}

func underOtherMount(target string, mounts []mount) bool {
	for _, o := range mounts {
		if o.target != target && strings.HasPrefix(target, o.target+"/") {
			return true
		}
	}
	return false
}

// bindHostEntries binds each entry of host directory dir read-only at the same path
// (symlinks are recreated), skipping the paths in skip.
func bindHostEntries(dir string, skip map[string]bool) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var args []string
	for _, e := range entries {
		p := path.Join(dir, e.Name())
		if skip[p] {
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
	return args, nil
}

// bwrapArgs builds the bubblewrap command line of a container's main process: the host's
// top-level entries bound read-only (so the sandbox sees the host's tools), fresh /proc
// and /dev, shadows (planShadows), the planned per-pod mounts, and the container's
// environment and working directory. Execs do not get a sandbox of their own: they join
// this one (container.go).
func bwrapArgs(pod *corev1.Pod, c *corev1.Container, mounts []mount, env []string, cmd []string) ([]string, error) {
	hidden := map[string]bool{"/proc": true, "/dev": true}
	for _, m := range mounts {
		top := "/" + strings.Split(strings.TrimPrefix(m.target, "/"), "/")[0]
		if top == m.target {
			hidden[top] = true
		}
	}
	shadows := planShadows(mounts)
	for _, s := range shadows {
		if path.Dir(s) == "/" {
			hidden[s] = true // replaced below instead of bound
		}
	}
	args := []string{"--die-with-parent", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
		"--hostname", hostname(pod.Name), "--proc", "/proc", "--dev", "/dev"}
	top, err := bindHostEntries("/", hidden)
	if err != nil {
		return nil, err
	}
	args = append(args, top...)
	for _, s := range shadows {
		entries, err := bindHostEntries(s, nil)
		if err != nil {
			return nil, err
		}
		args = append(append(args, "--tmpfs", s), entries...)
	}
	for _, m := range mounts {
		flag := "--bind"
		if m.readOnly {
			flag = "--ro-bind"
		}
		args = append(args, flag, m.source, m.target)
	}
	for _, s := range shadows {
		args = append(args, "--remount-ro", s) // read-only like the host directory it stands for
	}
	args = append(args, "--chdir", workDir(c), "--clearenv")
	for _, kv := range env {
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

// containerEnv is the environment of every process of a sandbox (kwok-played) pod's
// container, main process and execs alike: a fixed PATH, HOSTNAME and HOME, then the
// container's literal env values (valueFrom is resolved only for pods on the real nodes,
// see envSource.resolveEnv).
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
