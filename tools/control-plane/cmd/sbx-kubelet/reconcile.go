package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// A real kubelet's housekeeping kills the containers of pods that no longer exist, whatever
// the event stream said. Ours must too: a delete can be processed while an exec that read the
// pod just before it is about to start the container (pods.go refuses that now, by tombstone),
// a watch that relists can fold a create and a delete into nothing, and a bubblewrap killed
// while it was still starting can leave its sandbox's PID 1 behind (--die-with-parent is set
// by the child after the fork, so a parent killed first leaves a parentless init). So, every
// reconcileEvery and on every delete, each container this kubelet started is checked against
// the API server, and every process on this machine whose command line names a pod directory
// under --root is killed unless a live pod of this kubelet owns it.

// reconcileEvery bounds how long a container of a gone pod can outlive it.
const reconcileEvery = 5 * time.Second

// goneKeep is how long a deleted pod's UID is remembered; an exec that read the pod before
// its delete is over long before that, and a UID is never reused.
const goneKeep = time.Hour

// podRef names the pod a started container belongs to, for the API check.
type podRef struct {
	uid       types.UID
	namespace string
	name      string
}

// kickReconcile asks for a reconcile now (a delete was seen); never blocks.
func (d *podDirs) kickReconcile() {
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// reconcileLoop runs reconcile every reconcileEvery and after every delete until ctx ends.
// store is the pod informer's cache: only containers it lacks are checked with the API.
func (d *podDirs) reconcileLoop(ctx context.Context, client kubernetes.Interface, store cache.Store) {
	t := time.NewTicker(reconcileEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-d.kick:
		}
		d.reconcile(ctx, client, store)
	}
}

func (d *podDirs) reconcile(ctx context.Context, client kubernetes.Interface, store cache.Store) {
	for _, ref := range d.unconfirmed(store) {
		if podGone(ctx, client, ref) {
			fmt.Fprintf(os.Stderr, "sbx-kubelet: pod %s/%s (%s) no longer exists: stopping its containers\n",
				ref.namespace, ref.name, ref.uid)
			d.remove(ref.uid)
		}
	}
	for _, k := range d.killUnowned() {
		fmt.Fprintf(os.Stderr, "sbx-kubelet: killed process %d of pod %s, which no pod of this kubelet owns\n", k.pid, k.uid)
	}
	d.pruneGone(time.Now())
}

// unconfirmed are the started containers' pods that the informer's cache does not hold (with
// that UID): deleted, or merely not seen yet. The API server decides which.
func (d *podDirs) unconfirmed(store cache.Store) []podRef {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []podRef
	for uid, ref := range d.refs {
		obj, ok, _ := store.GetByKey(ref.namespace + "/" + ref.name)
		if pod, isPod := obj.(*corev1.Pod); ok && isPod && pod.UID == uid {
			continue
		}
		out = append(out, ref)
	}
	return out
}

// podGone says whether the API server no longer has the pod (or has another pod by its name).
// An error other than NotFound answers false: the next round asks again.
func podGone(ctx context.Context, client kubernetes.Interface, ref podRef) bool {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	pod, err := client.CoreV1().Pods(ref.namespace).Get(ctx, ref.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return true
	}
	return err == nil && pod.UID != ref.uid
}

func (d *podDirs) pruneGone(now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for uid, at := range d.gone {
		if now.Sub(at) > goneKeep {
			delete(d.gone, uid)
		}
	}
}

// killed is one process reconcile killed.
type killed struct {
	pid int
	uid types.UID
}

// killUnowned kills every process under d.root that no live pod owns: not a started container
// of a kwok-played pod (or one whose pod was deleted), not a pod on a real node. It holds d.mu
// while it looks, so a container being started (under d.mu) is either registered or not yet
// running; real pods register before their first container starts.
func (d *podDirs) killUnowned() []killed {
	d.mu.Lock()
	defer d.mu.Unlock()
	return killUnder(d.root, func(uid types.UID) bool {
		if d.gone[uid].IsZero() && d.main[uid] != nil {
			return true
		}
		return d.real != nil && d.real.get(uid) != nil
	})
}

// killUnder sends SIGKILL to every process (this one excepted) whose command line names a
// directory under root, unless keep says its pod owns it. Those are the bubblewrap processes
// of the pods' containers (the monitor on the host and the sandbox's PID 1, a fork that keeps
// its argv); killing a sandbox's PID 1 makes the kernel kill everything in its PID namespace,
// execs included.
func killUnder(root string, keep func(types.UID) bool) []killed {
	var out []killed
	for pid, uid := range processesUnder(root) {
		if keep(uid) {
			continue
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err == nil {
			out = append(out, killed{pid: pid, uid: uid})
		}
	}
	return out
}

// processesUnder maps each process whose command line holds "<root>/<name>" to that name
// (a pod UID).
func processesUnder(root string) map[int]types.UID {
	prefix := []byte(filepath.Clean(root) + "/")
	out := map[int]types.UID{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue // exited meanwhile
		}
		i := bytes.Index(cmdline, prefix)
		if i < 0 {
			continue
		}
		rest := cmdline[i+len(prefix):]
		if end := bytes.IndexAny(rest, "/\x00"); end >= 0 {
			rest = rest[:end]
		}
		if len(rest) > 0 {
			out[pid] = types.UID(rest)
		}
	}
	return out
}

// sweep kills every process under d.root (the kubelet is exiting: no pod owns anything any
// more) and waits up to wait for them to be gone, so nothing outlives this kubelet.
func (d *podDirs) sweep(wait time.Duration) {
	deadline := time.Now().Add(wait)
	for {
		left := killUnder(d.root, func(types.UID) bool { return false })
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			fmt.Fprintf(os.Stderr, "sbx-kubelet: %d processes under %s still alive at exit\n", len(left), d.root)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}
