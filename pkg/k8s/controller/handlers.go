package controller

import (
	"k8s.io/client-go/tools/cache"
)

// Tombstone returns the object a delete event carries: the object itself,
// or the last state a DeletedFinalStateUnknown holds.
func Tombstone(obj any) any {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return t.Obj
	}
	return obj
}

// OnChange is a handler calling on with the (old, new) objects of every
// event, tombstones unwrapped: (nil, obj) on add, (old, new) on update,
// (obj, nil) on delete. on only enqueues keys.
func OnChange(on func(old, obj any)) cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { on(nil, obj) },
		UpdateFunc: func(old, obj any) { on(old, obj) },
		DeleteFunc: func(obj any) { on(Tombstone(obj), nil) },
	}
}

// OnObject is a handler calling on with every event's current object (the
// new one on update, the last state on delete), tombstones unwrapped.
func OnObject(on func(obj any)) cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    on,
		UpdateFunc: func(_, obj any) { on(obj) },
		DeleteFunc: func(obj any) { on(Tombstone(obj)) },
	}
}

// As returns an event's object as a T, tombstones unwrapped.
func As[T any](obj any) (T, bool) {
	t, ok := Tombstone(obj).(T)
	return t, ok
}

// Synced reports whether every informer has synced (a readiness check).
func Synced(synced []cache.InformerSynced) bool {
	for _, s := range synced {
		if !s() {
			return false
		}
	}
	return true
}
