//go:build !linux

package main

// applySysmonSetting does nothing off Linux, where it was not measured.
func applySysmonSetting() {}
