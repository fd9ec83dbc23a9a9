package controller

import "sync"

// Parallel runs f(0..n-1), at most max at a time (a controller's writers:
// one API write per object), and returns when every call has.
func Parallel(n, max int, f func(i int)) {
	if n == 1 || max <= 1 {
		for i := range n {
			f(i)
		}
		return
	}
	sem := make(chan struct{}, max)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			f(i)
		}()
	}
	wg.Wait()
}
