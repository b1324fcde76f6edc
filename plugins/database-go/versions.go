package main

import (
	"fmt"
	"strconv"
	"strings"
)

// lines are the release lines each engine's image ships that this plugin
// runs, oldest first (plugins/database/src/versions.rs says why each).
func lines(e Engine) []string {
	switch e {
	case MySQL:
		return []string{"5.7", "8.0", "8.4"}
	case PostgreSQL:
		return []string{"13", "14", "15", "16", "17", "18"}
	default:
		return []string{"5.0", "6.0", "7.0", "8.0"}
	}
}

// checkVersion says why engine cannot run version, if it cannot.
func checkVersion(e Engine, version string) error {
	numbers, ok := versionNumbers(version)
	if !ok {
		return fmt.Errorf("must look like x.y.z, got %s", quote(version))
	}
	for _, line := range lines(e) {
		var want []uint64
		for _, p := range strings.Split(line, ".") {
			if n, err := strconv.ParseUint(p, 10, 64); err == nil {
				want = append(want, n)
			}
		}
		if len(want) <= len(numbers) && equal(numbers[:len(want)], want) {
			return nil
		}
	}
	return fmt.Errorf("%s %s is not shipped by the %s image this plugin supports: supported lines %s",
		e, version, e.Image(), strings.Join(lines(e), ", "))
}

func equal(a, b []uint64) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func versionNumbers(version string) ([]uint64, bool) {
	if !isXYZ(version) {
		return nil, false
	}
	var out []uint64
	for _, p := range strings.Split(version, ".") {
		n, err := strconv.ParseUint(p, 10, 64)
		if err != nil {
			return nil, false
		}
		out = append(out, n)
	}
	return out, true
}
