package main

import (
	"fmt"

	"github.com/go-logr/logr"
	"github.com/sirupsen/logrus"
	"k8s.io/klog/v2"
)

// routeKlog sends client-go's logging (klog: leader election, reflectors,
// event broadcaster) through the process's logrus logger, so an operator
// reads one format: klog's V(0) lines at Info (errors at Error), the
// verbose ones at Debug.
func routeKlog(log *logrus.Entry) {
	klog.SetLogger(logr.New(&logrusSink{entry: log.WithField("lib", "client-go")}))
}

// logrusSink is a logr.LogSink over a logrus entry.
type logrusSink struct {
	entry *logrus.Entry
}

func (s *logrusSink) Init(logr.RuntimeInfo) {}

func (s *logrusSink) Enabled(level int) bool {
	return level == 0 || s.entry.Logger.IsLevelEnabled(logrus.DebugLevel)
}

func (s *logrusSink) fields(kv []any) *logrus.Entry {
	e := s.entry
	for i := 0; i+1 < len(kv); i += 2 {
		e = e.WithField(fmt.Sprint(kv[i]), kv[i+1])
	}
	return e
}

func (s *logrusSink) Info(level int, msg string, kv ...any) {
	if level == 0 {
		s.fields(kv).Info(msg)
		return
	}
	s.fields(kv).Debug(msg)
}

func (s *logrusSink) Error(err error, msg string, kv ...any) {
	s.fields(kv).WithError(err).Error(msg)
}

func (s *logrusSink) WithValues(kv ...any) logr.LogSink {
	return &logrusSink{entry: s.fields(kv)}
}

func (s *logrusSink) WithName(name string) logr.LogSink {
	return &logrusSink{entry: s.entry.WithField("logger", name)}
}
