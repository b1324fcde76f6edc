//go:build wasip1

// The canonical-ABI glue for wit/plugin.wit (world plugin-with-admission),
// written by hand: no generator for this WIT can be pinned for the
// standard Go toolchain here. check-wit fails when wit/plugin.wit changes
// under it; the layouts below are the WIT's, wasm32:
//
//	api-resource       36 bytes: group@0 version@8 kind@16 plural@24 (strings) namespaced@32 (bool)
//	label-match        20: key@0, label-value@8 (tag u8@0, literal string@4)
//	related-resource   44: resource@0, match-labels@36 (list)
//	plugin-manifest   100: name@0 version@8 parent@16 mode@52 children@56 related@64
//	                       namespaces@72 finalizer@80 (option<string>: tag@0 string@4)
//	                       resync-seconds@92 (option<u32>: tag@0 u32@4)
//	event              20: warning@0 reason@4 message@12
//	response           56: children@0 status@8 (option<string>) parent-patch@20
//	                       (option<metadata-patch>: tag@0 labels@4 annotations@12)
//	                       requeue@40 (option<u32>) events@48
//	finalize-response  20: done@0 requeue@4 events@12
//	reference          60: resource@0 namespace@36 (option<string>) target@48 (tag@0 name|labels@4)
//	verdict            20: tag@0, allowed: list<string>@4, denied: message@4 causes@12
//	field-cause        16: field@0 message@8
//	error              12: tag@0 message@4
//	result<T, error>   tag@0, payload@4
//
// Parameters are flat (no function here has more than 16 flat values);
// every result is returned through a return area the guest allocates.
// What the host reads after a call (the return area and everything it
// points to) is kept alive until the next call starts.

package kubeplug

import (
	"fmt"
	"runtime"
	"strings"
	"unsafe"
)

//go:wasmimport kubeplug:plugin/log@0.1.0 log
func wasmLog(level uint32, message unsafe.Pointer, messageLen uint32, fields unsafe.Pointer, fieldsLen uint32)

// procExit is the shim's trap (kubeplug's preview1 shim makes it
// `unreachable`).
//
//go:wasmimport wasi_snapshot_preview1 proc_exit
func procExit(code uint32)

// The shim's own functions (host/kit/src/kit/go_shim.rs): stdout and
// stderr are gathered a line at a time in line, which the shim owns once
// registered, and each line is one log call (a runtime's fatal error or
// panic report at error level, so that the host reports its reason with
// the trap); flushLine logs a last line without its newline.
//
//go:wasmimport kubeplug:go-shim line-buffer
func lineBuffer(buffer unsafe.Pointer)

//go:wasmimport kubeplug:go-shim flush
func flushLine()

// line is the shim's line buffer: its size is the shim's LINE_BYTES.
var line [1024]byte

func init() { lineBuffer(unsafe.Pointer(&line[0])) }

// kept holds what the host may still read of the current (or, between
// calls, the last) call's results; incoming holds what the host allocated
// (cabi_realloc) for the next call's arguments, until that call has read
// them.
var kept, incoming []any

// memory is linear memory's address 0: in wasm32 an address the host
// hands over is a pointer into it.
var memory unsafe.Pointer

func at(address uint32) unsafe.Pointer { return unsafe.Add(memory, uintptr(address)) }

func address(p unsafe.Pointer) uint32 { return uint32(uintptr(p)) }

// allocIn is size zeroed bytes, 8-aligned, held by *holder.
func allocIn(holder *[]any, size uint32) uint32 {
	if size == 0 {
		return 8
	}
	words := make([]uint64, (size+7)/8)
	*holder = append(*holder, words)
	return address(unsafe.Pointer(unsafe.SliceData(words)))
}

// alloc is size zeroed bytes, 8-aligned, kept until the next call.
func alloc(size uint32) uint32 { return allocIn(&kept, size) }

//go:wasmexport cabi_realloc
func cabiRealloc(old, oldSize, align, size uint32) uint32 {
	p := allocIn(&incoming, size)
	if old != 0 && oldSize != 0 {
		copy(unsafe.Slice((*byte)(at(p)), size), unsafe.Slice((*byte)(at(old)), min(oldSize, size)))
	}
	return p
}

// enter starts an export: the previous call's results are read by now,
// this call's arguments are kept until it returns.
func enter() {
	kept, incoming = incoming, nil
	if registered == nil {
		panic("no plugin registered: call kubeplug.Export from an init function of package main")
	}
}

// guard ends every export: what the call printed is logged, and a panic
// becomes an error log (its message and the plugin's frame) and a trap, so
// that the host reports the message with the trap.
func guard() {
	r := recover()
	flushLine()
	if r == nil {
		return
	}
	message := fmt.Sprint("panic: ", r)
	pcs := make([]uintptr, 32)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs)])
	for {
		frame, more := frames.Next()
		if !strings.HasPrefix(frame.Function, "runtime.") && !strings.HasPrefix(frame.Function, "kubeplug/sdk.") {
			message += fmt.Sprintf(" at %s (%s:%d)", frame.Function, frame.File, frame.Line)
			break
		}
		if !more {
			break
		}
	}
	hostLog(LevelError, message, nil)
	procExit(2)
}

func hostLog(level Level, message string, fields [][2]string) {
	list := alloc(uint32(len(fields)) * 16)
	for i, f := range fields {
		putString(list+uint32(i)*16, f[0])
		putString(list+uint32(i)*16+8, f[1])
	}
	wasmLog(uint32(level), unsafe.Pointer(unsafe.StringData(message)), uint32(len(message)), at(list), uint32(len(fields)))
	runtime.KeepAlive(message)
}

// Lifting.

func getString(ptr, n uint32) string {
	if n == 0 {
		return ""
	}
	return string(unsafe.Slice((*byte)(at(ptr)), n))
}

func load32(p uint32) uint32 { return *(*uint32)(at(p)) }

func load8(p uint32) uint8 { return *(*uint8)(at(p)) }

func getStrings(ptr, n uint32) []string {
	out := make([]string, n)
	for i := range n {
		e := ptr + i*8
		out[i] = getString(load32(e), load32(e+4))
	}
	return out
}

func getOption(tag, ptr, n uint32) *string {
	if tag == 0 {
		return nil
	}
	s := getString(ptr, n)
	return &s
}

// Lowering.

func store32(p, v uint32) { *(*uint32)(at(p)) = v }

func store8(p uint32, v uint8) { *(*uint8)(at(p)) = v }

func putString(p uint32, s string) {
	if len(s) == 0 {
		store32(p, 1)
		store32(p+4, 0)
		return
	}
	kept = append(kept, s)
	store32(p, address(unsafe.Pointer(unsafe.StringData(s))))
	store32(p+4, uint32(len(s)))
}

func putList(p uint32, n, stride int, each func(element uint32, i int)) {
	list := alloc(uint32(n * stride))
	for i := range n {
		each(list+uint32(i*stride), i)
	}
	store32(p, list)
	store32(p+4, uint32(n))
}

func putStrings(p uint32, items []string) {
	putList(p, len(items), 8, func(e uint32, i int) { putString(e, items[i]) })
}

func putPairs(p uint32, items [][2]string) {
	putList(p, len(items), 16, func(e uint32, i int) {
		putString(e, items[i][0])
		putString(e+8, items[i][1])
	})
}

func putOptionString(p uint32, s *string) {
	if s != nil {
		store8(p, 1)
		putString(p+4, *s)
	}
}

func putOptionU32(p uint32, v *uint32) {
	if v != nil {
		store8(p, 1)
		store32(p+4, *v)
	}
}

func putResource(p uint32, r Resource) {
	putString(p, r.Group)
	putString(p+8, r.Version)
	putString(p+16, r.Kind)
	putString(p+24, r.Plural)
	if r.Namespaced {
		store8(p+32, 1)
	}
}

func putResources(p uint32, rs []Resource) {
	putList(p, len(rs), 36, func(e uint32, i int) { putResource(e, rs[i]) })
}

func putEvents(p uint32, events []Event) {
	putList(p, len(events), 20, func(e uint32, i int) {
		if events[i].Warning {
			store8(e, 1)
		}
		putString(e+4, events[i].Reason)
		putString(e+12, events[i].Message)
	})
}

// putError writes result::err(e) at ret.
func putError(ret uint32, e *Error) uint32 {
	store8(ret, 1)
	store8(ret+4, uint8(e.Kind))
	putString(ret+8, e.Message)
	return ret
}

func putManifest(p uint32, m *Manifest) {
	putString(p, m.Name)
	putString(p+8, m.Version)
	putResource(p+16, m.Parent)
	store8(p+52, uint8(m.Mode))
	putResources(p+56, m.Children)
	putList(p+64, len(m.Related), 44, func(e uint32, i int) {
		r := m.Related[i]
		putResource(e, r.Resource)
		putList(e+36, len(r.MatchLabels), 20, func(l uint32, j int) {
			match := r.MatchLabels[j]
			putString(l, match.Key)
			if match.Value.ParentName {
				store8(l+8, 1)
			} else {
				putString(l+12, match.Value.Literal)
			}
		})
	})
	putStrings(p+72, m.Namespaces)
	putOptionString(p+80, m.Finalizer)
	putOptionU32(p+92, m.ResyncSeconds)
}

// Exports.

//go:wasmexport kubeplug:plugin/reconciler@0.1.0#manifest
func exportManifest(configPtr, configLen uint32) uint32 {
	defer guard()
	enter()
	ret := alloc(104)
	m, e := registered.manifest(getString(configPtr, configLen))
	if e != nil {
		return putError(ret, e)
	}
	putManifest(ret+4, m)
	return ret
}

func liftRequest(parentPtr, parentLen, observedPtr, observedLen, relatedPtr, relatedLen, configPtr, configLen, nowPtr, nowLen, entropyPtr, entropyLen uint32) request {
	entropy := make([]byte, entropyLen)
	if entropyLen > 0 {
		copy(entropy, unsafe.Slice((*byte)(at(entropyPtr)), entropyLen))
	}
	return request{
		parent:   getString(parentPtr, parentLen),
		observed: getStrings(observedPtr, observedLen),
		related:  getStrings(relatedPtr, relatedLen),
		config:   getString(configPtr, configLen),
		now:      getString(nowPtr, nowLen),
		entropy:  entropy,
	}
}

//go:wasmexport kubeplug:plugin/reconciler@0.1.0#reconcile
func exportReconcile(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11 uint32) uint32 {
	defer guard()
	enter()
	ret := alloc(60)
	r, e := registered.reconcile(liftRequest(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11))
	if e != nil {
		return putError(ret, e)
	}
	p := ret + 4
	putStrings(p, r.Children)
	putOptionString(p+8, r.StatusJSON)
	if len(r.Labels) > 0 || len(r.Annotations) > 0 {
		store8(p+20, 1)
		putPairs(p+24, r.Labels)
		putPairs(p+32, r.Annotations)
	}
	putOptionU32(p+40, r.RequeueAfterSeconds)
	putEvents(p+48, r.Events)
	return ret
}

//go:wasmexport kubeplug:plugin/reconciler@0.1.0#finalize
func exportFinalize(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11 uint32) uint32 {
	defer guard()
	enter()
	ret := alloc(24)
	f, e := registered.finalize(liftRequest(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11))
	if e != nil {
		return putError(ret, e)
	}
	p := ret + 4
	if f.Done {
		store8(p, 1)
	}
	putOptionU32(p+4, f.RequeueAfterSeconds)
	putEvents(p+12, f.Events)
	return ret
}

//go:wasmexport kubeplug:plugin/reads@0.1.0#metadata-only
func exportMetadataOnly(configPtr, configLen uint32) uint32 {
	defer guard()
	enter()
	ret := alloc(8)
	putResources(ret, registered.metadataOnly(getString(configPtr, configLen)))
	return ret
}

//go:wasmexport kubeplug:plugin/references@0.1.0#kinds
func exportKinds(configPtr, configLen uint32) uint32 {
	defer guard()
	enter()
	ret := alloc(8)
	putResources(ret, registered.referenceKinds(getString(configPtr, configLen)))
	return ret
}

//go:wasmexport kubeplug:plugin/references@0.1.0#references
func exportReferences(parentPtr, parentLen, configPtr, configLen uint32) uint32 {
	defer guard()
	enter()
	ret := alloc(16)
	refs, e := registered.references(getString(parentPtr, parentLen), getString(configPtr, configLen))
	if e != nil {
		return putError(ret, e)
	}
	putList(ret+4, len(refs), 60, func(p uint32, i int) {
		r := refs[i]
		putResource(p, r.Resource)
		putOptionString(p+36, r.Namespace)
		if r.Name != "" || len(r.Labels) == 0 {
			putString(p+52, r.Name)
		} else {
			store8(p+48, 1)
			putPairs(p+52, r.Labels)
		}
	})
	return ret
}

//go:wasmexport kubeplug:plugin/admission@0.1.0#offered
func exportOffered(configPtr, configLen uint32) uint32 {
	defer guard()
	enter()
	ret := alloc(8)
	hooks := registered.offered(getString(configPtr, configLen))
	putList(ret, len(hooks), 1, func(p uint32, i int) { store8(p, uint8(hooks[i])) })
	return ret
}

func liftAdmission(op, objTag, objPtr, objLen, oldTag, oldPtr, oldLen, userPtr, userLen, groupsPtr, groupsLen, dryRun, configPtr, configLen, nowPtr, nowLen uint32) admissionRequest {
	return admissionRequest{
		operation: Operation(op),
		object:    getOption(objTag, objPtr, objLen),
		oldObject: getOption(oldTag, oldPtr, oldLen),
		username:  getString(userPtr, userLen),
		groups:    getStrings(groupsPtr, groupsLen),
		dryRun:    dryRun != 0,
		config:    getString(configPtr, configLen),
		now:       getString(nowPtr, nowLen),
	}
}

//go:wasmexport kubeplug:plugin/admission@0.1.0#validate
func exportValidate(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15 uint32) uint32 {
	defer guard()
	enter()
	ret := alloc(24)
	v, e := registered.validate(liftAdmission(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15))
	if e != nil {
		return putError(ret, e)
	}
	p := ret + 4
	if !v.Denied {
		putStrings(p+4, v.Warnings)
		return ret
	}
	store8(p, 1)
	putString(p+4, v.Message)
	putList(p+12, len(v.Causes), 16, func(c uint32, i int) {
		putString(c, v.Causes[i].Field)
		putString(c+8, v.Causes[i].Message)
	})
	return ret
}

//go:wasmexport kubeplug:plugin/admission@0.1.0#mutate
func exportMutate(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15 uint32) uint32 {
	defer guard()
	enter()
	ret := alloc(16)
	object, e := registered.mutate(liftAdmission(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15))
	if e != nil {
		return putError(ret, e)
	}
	putOptionString(ret+4, object)
	return ret
}

//go:wasmexport kubeplug:plugin/conversion@0.1.0#convert
func exportConvert(objectsPtr, objectsLen, versionPtr, versionLen, configPtr, configLen uint32) uint32 {
	defer guard()
	enter()
	ret := alloc(16)
	out, e := registered.convert(getStrings(objectsPtr, objectsLen), getString(versionPtr, versionLen), getString(configPtr, configLen))
	if e != nil {
		return putError(ret, e)
	}
	putStrings(ret+4, out)
	return ret
}
