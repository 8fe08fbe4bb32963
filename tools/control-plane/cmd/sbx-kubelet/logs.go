package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// handleLogs serves /containerLogs/{ns}/{pod}/{container}: the main process's output
// (see podDirs.startMain). Supports tailLines, limitBytes and follow; timestamps and
// sinceSeconds are accepted and ignored, previous=true is refused because containers
// here never restart.
func (s *server) handleLogs(w http.ResponseWriter, req *http.Request) {
	ns, name, container, ok := podPath("/containerLogs/", req.URL.Path)
	if !ok {
		http.Error(w, "expected /containerLogs/{namespace}/{pod}/{container}", http.StatusNotFound)
		return
	}
	q := req.URL.Query()
	pod, err := s.client.CoreV1().Pods(ns).Get(req.Context(), name, metav1.GetOptions{})
	if err != nil {
		writeAPIError(w, err)
		return
	}
	if !hasContainer(pod, container) {
		writeAPIError(w, apierrors.NewNotFound(corev1.Resource("containers"), container))
		return
	}
	path := s.pods.logPath(pod.UID, container)
	if q.Get("previous") == "true" {
		// only pods on the real nodes restart containers; the previous run's log is kept
		path = previousLogPath(path)
		if _, err := os.Stat(path); err != nil || !s.real.owns(pod) {
			writeAPIError(w, apierrors.NewBadRequest(fmt.Sprintf("previous terminated container %q in pod %q not found", container, name)))
			return
		}
	}
	waitForFile(path, 200*time.Millisecond)
	data, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		writeAPIError(w, err)
		return
	}
	end := int64(len(data))
	if n, err := strconv.Atoi(q.Get("tailLines")); err == nil && n >= 0 {
		data = lastLines(data, n)
	}
	limit := int64(-1)
	if n, err := strconv.ParseInt(q.Get("limitBytes"), 10, 64); err == nil && n > 0 {
		limit = n
	}
	w.Header().Set("Content-Type", "text/plain")
	writeLimited(w, data, &limit)
	if q.Get("follow") != "true" || limit == 0 {
		return
	}
	s.follow(w, req, path, end, &limit)
}

func (s *server) follow(w http.ResponseWriter, req *http.Request, path string, offset int64, limit *int64) {
	flusher, _ := w.(http.Flusher)
	if flusher != nil {
		flusher.Flush()
	}
	ticker := time.NewTicker(50 * time.Millisecond)
	defer ticker.Stop()
	for {
		select {
		case <-req.Context().Done():
			return
		case <-ticker.C:
		}
		f, err := os.Open(path)
		if err != nil {
			if os.IsNotExist(err) && offset > 0 {
				return // pod deleted: its directory is gone
			}
			continue
		}
		_, _ = f.Seek(offset, io.SeekStart)
		chunk, _ := io.ReadAll(f)
		f.Close()
		if len(chunk) == 0 {
			continue
		}
		offset += int64(len(chunk))
		writeLimited(w, chunk, limit)
		if flusher != nil {
			flusher.Flush()
		}
		if *limit == 0 {
			return
		}
	}
}

func writeLimited(w io.Writer, data []byte, limit *int64) {
	if *limit >= 0 && int64(len(data)) > *limit {
		data = data[:*limit]
	}
	n, _ := w.Write(data)
	if *limit >= 0 {
		*limit -= int64(n)
	}
}

func lastLines(data []byte, n int) []byte {
	if n == 0 {
		return nil
	}
	end := len(data)
	if end > 0 && data[end-1] == '\n' {
		end--
	}
	for i := end - 1; i >= 0; i-- {
		if data[i] == '\n' {
			n--
			if n == 0 {
				return data[i+1:]
			}
		}
	}
	return data
}

func hasContainer(pod *corev1.Pod, name string) bool {
	for _, c := range pod.Spec.Containers {
		if c.Name == name {
			return true
		}
	}
	return false
}
