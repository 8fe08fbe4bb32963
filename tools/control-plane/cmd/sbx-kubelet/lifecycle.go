package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// runInit runs the init containers to completion, in order; a failed one is retried with
// back-off (or fails the pod under restartPolicy Never). false: the pod is stopping or failed.
func (p *realPod) runInit() bool {
	for _, cs := range p.init {
		backoff := restartBackoffStart
		for {
			code, ok := p.runToExit(cs)
			if !ok {
				return false
			}
			if code == 0 {
				break
			}
			if p.spec().Spec.RestartPolicy == corev1.RestartPolicyNever {
				return false
			}
			p.backOff(cs, backoff)
			if !p.sleep(backoff) {
				return false
			}
			backoff = min(2*backoff, restartBackoffMax)
		}
	}
	p.mu.Lock()
	p.initialized = true
	for _, cs := range p.main {
		cs.state = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}
	}
	p.mu.Unlock()
	p.markDirty()
	return true
}

// runToExit starts one instance of an init container and waits for it: its exit code, and
// false when the pod is stopping.
func (p *realPod) runToExit(cs *ctrState) (int, bool) {
	inst, err := p.startInstance(cs)
	if err != nil {
		p.setState(cs, corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CreateContainerConfigError", Message: err.Error()}})
		return 1, p.sleep(restartBackoffStart)
	}
	p.setRunning(cs, inst)
	select {
	case <-inst.exited:
	case <-p.ctx.Done():
		inst.terminate(p.grace())
		return 0, false
	}
	p.setState(cs, terminatedState(inst))
	return inst.exitCode, true
}

// supervise keeps one main container running as its restartPolicy says: probes while it
// runs, restarts with back-off after it exits, a graceful stop when the pod is deleted.
func (p *realPod) supervise(cs *ctrState) {
	backoff := restartBackoffStart
	for {
		inst, err := p.startInstance(cs)
		if err != nil {
			p.setState(cs, corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CreateContainerConfigError", Message: err.Error()}})
			if !p.sleep(backoff) {
				return
			}
			backoff = min(2*backoff, restartBackoffMax)
			continue
		}
		began := time.Now()
		p.setRunning(cs, inst)
		probeCtx, stopProbes := context.WithCancel(p.ctx)
		go p.probe(probeCtx, cs, inst)
		select {
		case <-inst.exited:
		case <-p.ctx.Done():
		}
		stopProbes()
		if p.ctx.Err() != nil {
			inst.terminate(p.grace())
			p.setState(cs, terminatedState(inst))
			return
		}
		code := inst.exitCode
		policy := p.spec().Spec.RestartPolicy
		if policy == corev1.RestartPolicyNever || (policy == corev1.RestartPolicyOnFailure && code == 0) {
			p.setState(cs, terminatedState(inst))
			return
		}
		if time.Since(began) > restartResetAfter {
			backoff = restartBackoffStart
		}
		p.setState(cs, terminatedState(inst))
		p.backOff(cs, backoff)
		if !p.sleep(backoff) {
			return
		}
		backoff = min(2*backoff, restartBackoffMax)
	}
}

func terminatedState(inst *container) corev1.ContainerState {
	reason := "Completed"
	if inst.exitCode != 0 {
		reason = "Error"
	}
	return corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
		ExitCode: int32(inst.exitCode), Reason: reason, StartedAt: inst.startedAt, FinishedAt: metav1.Now(),
		ContainerID: inst.id,
	}}
}

// backOff records a restart: the terminated state moves to lastState, the count goes up,
// and the container waits in CrashLoopBackOff.
func (p *realPod) backOff(cs *ctrState, d time.Duration) {
	p.mu.Lock()
	cs.last = cs.state
	cs.restarts++
	cs.ready, cs.started = false, false
	cs.state = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff",
		Message: fmt.Sprintf("back-off %s restarting failed container=%s pod=%s", d, cs.spec.Name, p.pod.Name)}}
	p.mu.Unlock()
	p.markDirty()
}

// startInstance starts one run of a container: env and command resolved, mounts planned,
// bubblewrap launched inside the pod's network namespace. The previous run's log is kept
// as <name>.previous.log (logs?previous=true).
func (p *realPod) startInstance(cs *ctrState) (*container, error) {
	pod, c := p.spec(), cs.spec
	dir := p.r.dirs.dir(pod.UID)
	env, err := p.envSource(p.ctx).resolveEnv(c)
	if err != nil {
		return nil, err
	}
	cmd := expandAll(append(append([]string{}, c.Command...), c.Args...), env.lookup)
	if len(cmd) == 0 {
		cmd = holdCommand
	}
	mounts, err := planMounts(pod, c, dir, true)
	if err != nil {
		return nil, err
	}
	args, err := bwrapArgs(pod, c, mounts, env.pairs(), withReadyShim(cmd))
	if err != nil {
		return nil, err
	}
	logPath := p.r.dirs.logPath(pod.UID, c.Name)
	if _, err := os.Stat(logPath); err == nil {
		_ = os.MkdirAll(filepath.Dir(previousLogPath(logPath)), 0o755)
		_ = os.Rename(logPath, previousLogPath(logPath))
	}
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	var launcher []string
	p.mu.Lock()
	if p.netns != nil {
		launcher = []string{p.r.cfg.nsenter, "--net=" + p.netns.path(), "--"}
	}
	p.mu.Unlock()
	inst := startContainer(launcher, p.r.cfg.bwrap, args, log)
	inst.env = env.pairs()
	inst.startedAt = metav1.Now()
	inst.id = fmt.Sprintf("sbx://%s-%s-%d", string(pod.UID)[:8], c.Name, cs.restarts)
	go func() { <-inst.exited; log.Close() }()
	if _, err := inst.running(); err != nil {
		inst.kill()
		<-inst.exited
		return nil, err
	}
	return inst, nil
}

func previousLogPath(p string) string {
	return filepath.Join(filepath.Dir(p), "previous", filepath.Base(p))
}

func expandAll(list []string, lookup func(string) (string, bool)) []string {
	out := make([]string, len(list))
	for i, s := range list {
		out[i] = expandVars(s, lookup)
	}
	return out
}
