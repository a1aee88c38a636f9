//go:build !linux

package storage

import "errors"

func dropPageCache(dir string) error { return errors.New("not on this OS") }
