package main

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// statusLoop writes the pod's status whenever something changed (coalesced: at most one
// write in flight, then a short pause), until the pod's clean-up is done.
func (p *realPod) statusLoop() {
	for {
		select {
		case <-p.done:
			return
		case <-p.dirty:
		}
		p.writeStatus()
		time.Sleep(50 * time.Millisecond)
	}
}

// writeStatus reads the pod fresh, sets the status this kubelet owns and writes it if it
// changed; a conflict is retried on the newer object.
func (p *realPod) writeStatus() {
	pods := p.r.client.CoreV1().Pods(p.spec().Namespace)
	for attempt := 0; attempt < 5; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		cur, err := pods.Get(ctx, p.spec().Name, metav1.GetOptions{})
		if err != nil || cur.UID != p.uid {
			cancel()
			return // deleted: nothing to report to
		}
		next := cur.DeepCopy()
		next.Status = p.buildStatus(cur.Status)
		if apiequality.Semantic.DeepEqual(cur.Status, next.Status) {
			cancel()
			return
		}
		_, err = pods.UpdateStatus(ctx, next, metav1.UpdateOptions{})
		cancel()
		if err == nil || !apierrors.IsConflict(err) {
			return
		}
	}
}

// buildStatus is the pod status from the containers' states, keeping what others own
// (PodScheduled, qosClass) and each condition's transition time while it holds.
func (p *realPod) buildStatus(old corev1.PodStatus) corev1.PodStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := *old.DeepCopy()
	st.HostIP = p.r.cfg.hostIP
	st.HostIPs = []corev1.HostIP{{IP: p.r.cfg.hostIP}}
	if p.ip != nil {
		st.PodIP = p.ip.String()
		st.PodIPs = []corev1.PodIP{{IP: st.PodIP}}
	}
	st.StartTime = &p.startTime
	st.InitContainerStatuses = containerStatuses(p.init)
	st.ContainerStatuses = containerStatuses(p.main)
	allReady := true
	for _, cs := range p.main {
		allReady = allReady && cs.ready
	}
	st.Phase = p.phase()
	if p.initialized {
		st.Message, st.Reason = "", ""
	}
	setCondition(&st, corev1.PodReadyToStartContainers, p.ip != nil, "")
	setCondition(&st, corev1.PodInitialized, p.initialized, "ContainersNotInitialized")
	setCondition(&st, corev1.ContainersReady, allReady, "ContainersNotReady")
	setCondition(&st, corev1.PodReady, allReady, "ContainersNotReady")
	return st
}

// phase follows the kubelet: Pending until the main containers have started, Succeeded or
// Failed once every one has terminated for good, Running otherwise.
func (p *realPod) phase() corev1.PodPhase {
	if !p.initialized {
		for _, cs := range p.init {
			if cs.state.Terminated != nil && cs.state.Terminated.ExitCode != 0 && p.pod.Spec.RestartPolicy == corev1.RestartPolicyNever {
				return corev1.PodFailed
			}
		}
		return corev1.PodPending
	}
	started, terminated, failed := false, 0, false
	for _, cs := range p.main {
		if cs.state.Running != nil || cs.restarts > 0 || cs.state.Terminated != nil {
			started = true
		}
		if t := cs.state.Terminated; t != nil {
			terminated++
			failed = failed || t.ExitCode != 0
		}
	}
	switch {
	case !started:
		return corev1.PodPending
	case terminated == len(p.main) && p.ctx.Err() == nil:
		if failed {
			return corev1.PodFailed
		}
		return corev1.PodSucceeded
	}
	return corev1.PodRunning
}

func containerStatuses(list []*ctrState) []corev1.ContainerStatus {
	out := make([]corev1.ContainerStatus, 0, len(list))
	for _, cs := range list {
		started := cs.started
		s := corev1.ContainerStatus{
			Name: cs.spec.Name, Image: cs.spec.Image, ImageID: "", Ready: cs.ready, Started: &started,
			RestartCount: cs.restarts, State: cs.state, LastTerminationState: cs.last,
		}
		if cs.cur != nil {
			s.ContainerID = cs.cur.id
		}
		out = append(out, s)
	}
	return out
}

// setCondition sets a condition's status, keeping its transition time when it holds.
func setCondition(st *corev1.PodStatus, t corev1.PodConditionType, ok bool, reason string) {
	status, why := corev1.ConditionTrue, ""
	if !ok {
		status, why = corev1.ConditionFalse, reason
	}
	for i := range st.Conditions {
		c := &st.Conditions[i]
		if c.Type != t {
			continue
		}
		if c.Status != status {
			c.Status, c.LastTransitionTime = status, metav1.Now()
		}
		c.Reason = why
		return
	}
	st.Conditions = append(st.Conditions, corev1.PodCondition{Type: t, Status: status, Reason: why, LastTransitionTime: metav1.Now()})
}
