// deep_gemm_sm120._C.FastCalls: a cached call served without the interpreter (docs/host_design.md, "The C
// fast path"). An entry point's first call of a signature runs its Python checks and plan and records its
// launches and the tensors it allocated for them; add() keeps them under the call's signature. A later call of
// that signature compares the signature, makes its own allocations through the recorded factories, writes its
// addresses into copies of the recorded parameter buffers and tensor-map requests, launches, and (tables made
// with returns=True) returns what the checked call returned, rebuilt from the new allocations: no Python frame
// of the entry point's, no struct packing. Tensors are read through their Python attributes (no torch ABI),
// exactly what launch.tensor_key reads: class, dtype, shape, strides, device, the address's 16-byte class.
#include <Python.h>
#include <structmember.h>

#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "launch.h"

namespace dg_sm120 {
namespace {

constexpr size_t kMaxTensors = 32;
constexpr size_t kMaxRank = 8;
constexpr size_t kMaxSequence = 8;     // items of a tuple / list argument
constexpr size_t kTmaRecord = 120;     // core/tma.py RECORD
constexpr size_t kTmaAddress = 16;     // the address field's offset in a record
constexpr size_t kMaxBuffer = 4096;    // runtime.cpp kMaxParamBytes
constexpr Py_ssize_t kMaxString = 64;  // longer strings are never part of a served signature

// Key tags: every part of a signature starts with one, so two argument lists key alike only if they read alike.
enum : int64_t { kNone = 1, kTensor, kFalse, kTrue, kInt, kFloat, kStr, kTuple, kList };

PyObject* s_dtype = nullptr;
PyObject* s_shape = nullptr;
PyObject* s_stride = nullptr;
PyObject* s_is_cuda = nullptr;
PyObject* s_get_device = nullptr;
PyObject* s_data_ptr = nullptr;
PyObject* s_as_strided = nullptr;
PyObject* s_launch = nullptr;
PyObject* s_stream = nullptr;
PyObject* s_pdl = nullptr;
PyObject* g_real_launch = nullptr;  // _C.launch: when the launcher holds it, a hit launches without boxing

// Classes and dtypes a signature names, by address. Each is kept alive once seen, so an address in a key (this
// table's or the bytes key a miss hands the checked path) always means the same object. Bounded: a process that
// makes endless tensor subclasses gets its calls checked every time past the bound, not an unbounded cache.
constexpr size_t kMaxInterned = 1024;
std::unordered_set<PyObject*> g_interned;

bool intern(PyObject* o) {
    if (g_interned.count(o)) return true;
    if (g_interned.size() >= kMaxInterned) return false;
    Py_INCREF(o);
    g_interned.insert(o);
    return true;
}

// A call's signature as bytes, and the addresses of its tensors in argument order (None takes no slot).
struct Signature {
    std::string key;
    uint64_t ptrs[kMaxTensors];
    size_t tensors = 0;

    void put(int64_t v) { key.append(reinterpret_cast<const char*>(&v), sizeof v); }
};

bool read_index(PyObject* o, int64_t& out) {
    const long long v = PyLong_AsLongLong(o);
    if (v == -1 && PyErr_Occurred()) return false;
    out = v;
    return true;
}

// shape and stride() of a tensor: tuples of ints of one length
bool read_dims(Signature& s, PyObject* shape, PyObject* stride) {
    if (!PyTuple_Check(shape) || !PyTuple_Check(stride)) return false;
    const Py_ssize_t n = PyTuple_GET_SIZE(shape);
    if (n != PyTuple_GET_SIZE(stride) || static_cast<size_t>(n) > kMaxRank) return false;
    s.put(n);
    for (Py_ssize_t i = 0; i < n; ++i) {
        int64_t size = 0, step = 0;
        if (!read_index(PyTuple_GET_ITEM(shape, i), size) || !read_index(PyTuple_GET_ITEM(stride, i), step))
            return false;
        s.put(size);
        s.put(step);
    }
    return true;
}

// A tensor argument, or None (an optional tensor left out). Its class and dtype are interned only once every
// attribute was read: an object that merely has a dtype takes no slot of the bound.
bool read_tensor(Signature& s, PyObject* o) {
    if (o == Py_None) {
        s.put(kNone);
        return true;
    }
    if (s.tensors == kMaxTensors) return false;
    PyObject* type = reinterpret_cast<PyObject*>(Py_TYPE(o));
    s.put(kTensor);
    s.put(reinterpret_cast<intptr_t>(type));
    PyObject* dtype = PyObject_GetAttr(o, s_dtype);
    if (!dtype) return false;
    s.put(reinterpret_cast<intptr_t>(dtype));
    bool ok = false;
    if (PyObject* shape = PyObject_GetAttr(o, s_shape)) {
        PyObject* stride = PyObject_CallMethodNoArgs(o, s_stride);
        ok = stride && read_dims(s, shape, stride);
        Py_DECREF(shape);
        Py_XDECREF(stride);
    }
    PyObject* is_cuda = ok ? PyObject_GetAttr(o, s_is_cuda) : nullptr;
    ok = is_cuda && (is_cuda == Py_True || is_cuda == Py_False);
    if (ok) s.put(is_cuda == Py_True);
    Py_XDECREF(is_cuda);
    PyObject* index = ok ? PyObject_CallMethodNoArgs(o, s_get_device) : nullptr;
    int64_t device = 0;
    ok = index && read_index(index, device);
    Py_XDECREF(index);
    if (ok) s.put(device);
    PyObject* address = ok ? PyObject_CallMethodNoArgs(o, s_data_ptr) : nullptr;
    unsigned long long ptr = 0;
    if (address) {
        ptr = PyLong_AsUnsignedLongLong(address);
        ok = !(ptr == static_cast<unsigned long long>(-1) && PyErr_Occurred());
        Py_DECREF(address);
    } else {
        ok = false;
    }
    // A key compares the class and dtype by address: kept alive once seen, the address stays theirs.
    ok = ok && intern(type) && intern(dtype);
    Py_DECREF(dtype);
    if (!ok) return false;
    s.put(static_cast<int64_t>(ptr & 15));
    // The first earlier argument at this very address (this one's own index when none): every call of the
    // signature then shares addresses the same way (c aliasing d), so a shared address is patched from the first.
    size_t first = s.tensors;
    for (size_t j = 0; j < s.tensors; ++j)
        if (s.ptrs[j] == ptr) {
            first = j;
            break;
        }
    s.put(static_cast<int64_t>(first));
    s.ptrs[s.tensors++] = ptr;
    return true;
}

bool read_value(Signature& s, PyObject* o, bool nested);

// The items of an exact tuple or list (tagged apart), each read by `read`. A list is read from a tuple copy: an
// item's attributes may run Python that changes the list, which must not free what is being read.
template <typename Read>
bool read_items(Signature& s, PyObject* o, Read read) {
    const bool tuple = PyTuple_CheckExact(o);
    PyObject* items = tuple ? o : PySequence_Tuple(o);
    if (!items) return false;
    const Py_ssize_t n = PyTuple_GET_SIZE(items);
    bool ok = static_cast<size_t>(n) <= kMaxSequence;
    if (ok) {
        s.put(tuple ? kTuple : kList);
        s.put(n);
    }
    for (Py_ssize_t i = 0; ok && i < n; ++i) ok = read(s, PyTuple_GET_ITEM(items, i));
    if (!tuple) Py_DECREF(items);
    return ok;
}

// A plain argument: None, a bool, an int, a float, a short str, or a tuple / list of those (one level).
bool read_value(Signature& s, PyObject* o, bool nested) {
    if (o == Py_None) {
        s.put(kNone);
    } else if (o == Py_True || o == Py_False) {
        s.put(o == Py_True ? kTrue : kFalse);
    } else if (PyLong_CheckExact(o)) {
        int64_t v = 0;
        if (!read_index(o, v)) return false;
        s.put(kInt);
        s.put(v);
    } else if (PyFloat_CheckExact(o)) {
        const double d = PyFloat_AS_DOUBLE(o);
        int64_t bits = 0;
        std::memcpy(&bits, &d, sizeof bits);
        s.put(kFloat);
        s.put(bits);
    } else if (PyUnicode_CheckExact(o)) {
        Py_ssize_t n = 0;
        const char* text = PyUnicode_AsUTF8AndSize(o, &n);
        if (!text || n > kMaxString) return false;
        s.put(kStr);
        s.put(n);
        s.key.append(text, static_cast<size_t>(n));
    } else if (!nested && (PyTuple_CheckExact(o) || PyList_CheckExact(o))) {
        return read_items(s, o, [](Signature& sig, PyObject* item) { return read_value(sig, item, true); });
    } else {
        return false;
    }
    return true;
}

// A pair argument: DeepGEMM's (tensor, scales), a tuple or list of tensors, or a bare tensor.
bool read_pair(Signature& s, PyObject* o) {
    if (!PyTuple_CheckExact(o) && !PyList_CheckExact(o)) return read_tensor(s, o);
    return read_items(s, o, read_tensor);
}

// The signature of argv under `schema` (one letter per argument: T tensor or None, P pair, V plain value).
// False (a Python error may be set) when an argument is not what its letter allows or cannot be read.
bool read_signature(Signature& s, const std::string& schema, PyObject* const* argv, size_t n) {
    if (n != schema.size()) return false;
    s.key.reserve(64 * n);
    for (size_t i = 0; i < n; ++i) {
        const char kind = schema[i];
        const bool ok = kind == 'T'   ? read_tensor(s, argv[i])
                        : kind == 'P' ? read_pair(s, argv[i])
                                      : read_value(s, argv[i], false);
        if (!ok) return false;
    }
    return true;
}

struct Patch {
    uint32_t tensor;  // which of the call's tensors, or (fresh) which of the tensors the call allocates
    uint32_t offset;  // where its address goes
    bool tmaps;       // in the tensor-map requests (else the parameter buffer)
    bool fresh;       // an address inside a tensor allocated per call (launch.empty / launch.zeros)
    uint64_t at;      // the address's byte offset from that tensor's start (0 for an argument's own address)
};

struct Launch {
    int handle = 0;
    uint32_t gx = 0, gy = 0, gz = 0, block = 0, smem = 0;
    PyObject* index = nullptr;  // the device index, as the stream getter takes it
    bool pdl = false;           // the kernel's family may launch with PDL (and-ed with the switch per call)
    std::string params, tmaps;
    std::vector<Patch> patches;
};

// Held by shared_ptr: a hit keeps its entry alive while it launches, even if a launch entry that calls back into
// Python (a test's recorder) clears the table meanwhile. Destroyed with the GIL held, as everything here runs.
struct Entry {
    std::vector<Launch> launches;
    // Tensors the checked call allocated and a launch addresses (a split-K workspace, an output): made anew by
    // each served call, in order, through the factory launch.empty / launch.zeros recorded (torch's allocator,
    // on the current stream, as the checked call's allocation; under graph capture, the graph's pool).
    std::vector<PyObject*> factories;
    // What a served call returns (tables made with returns=True): nullptr, none (True is returned); else a tuple
    // ("one", item) or ("tuple", (item, ...)) with item = j (the j-th fresh tensor) or (j, size, stride, offset)
    // (a view of it, made by as_strided).
    PyObject* result = nullptr;

    Entry() = default;
    Entry(const Entry&) = delete;
    Entry& operator=(const Entry&) = delete;
    ~Entry() {
        for (Launch& l : launches) Py_XDECREF(l.index);
        for (PyObject* f : factories) Py_DECREF(f);
        Py_XDECREF(result);
    }
};

constexpr size_t kMaxFresh = 16;

struct FastCalls {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject* launcher;  // launch.BOUND: its launch entry, stream getter and PDL switch are read per hit
    std::string* schema;
    std::unordered_map<std::string, std::shared_ptr<Entry>>* entries;
    Py_ssize_t limit;
    unsigned long long hits;
    bool returns;  // the entry point returns what its call allocates (see Entry::result)
};

void clear_entries(FastCalls* self) { self->entries->clear(); }

// One recorded launch, replayed with the call's addresses. Returns false with a Python error set.
bool replay(const Launch& l, const Signature& s, const uint64_t* fresh, PyObject* launch_fn, PyObject* stream_fn,
            bool pdl_switch) {
    // The stream first: a getter written in Python may make a served call of its own on this thread, which
    // refills the buffers below.
    PyObject* st = PyObject_CallOneArg(stream_fn, l.index);
    if (!st) return false;
    const unsigned long long stream = PyLong_AsUnsignedLongLong(st);
    Py_DECREF(st);
    if (stream == static_cast<unsigned long long>(-1) && PyErr_Occurred()) return false;
    thread_local std::string params, tmaps;
    params.assign(l.params);
    tmaps.assign(l.tmaps);
    for (const Patch& p : l.patches) {
        const uint64_t address = (p.fresh ? fresh[p.tensor] : s.ptrs[p.tensor]) + p.at;
        std::memcpy((p.tmaps ? tmaps.data() : params.data()) + p.offset, &address, sizeof(uint64_t));
    }
    const bool pdl = l.pdl && pdl_switch;
    if (launch_fn == g_real_launch) {
        try {
            launch(l.handle, l.gx, l.gy, l.gz, l.block, l.smem, stream, pdl, params, tmaps);
        } catch (const std::invalid_argument& e) {
            PyErr_SetString(PyExc_ValueError, e.what());
            return false;
        } catch (const std::exception& e) {
            PyErr_SetString(PyExc_RuntimeError, e.what());
            return false;
        }
        return true;
    }
    // Another launch entry (compile mode's, a test's recorder): called as launch.launch calls it.
    PyObject* args[10] = {PyLong_FromLong(l.handle),
                          PyLong_FromUnsignedLong(l.gx),
                          PyLong_FromUnsignedLong(l.gy),
                          PyLong_FromUnsignedLong(l.gz),
                          PyLong_FromUnsignedLong(l.block),
                          PyLong_FromUnsignedLong(l.smem),
                          PyLong_FromUnsignedLongLong(stream),
                          PyBool_FromLong(pdl),
                          PyBytes_FromStringAndSize(params.data(), static_cast<Py_ssize_t>(params.size())),
                          PyBytes_FromStringAndSize(tmaps.data(), static_cast<Py_ssize_t>(tmaps.size()))};
    PyObject* r = nullptr;
    bool built = true;
    for (PyObject* a : args) built = built && a;
    if (built) r = PyObject_Vectorcall(launch_fn, args, 10, nullptr);
    for (PyObject* a : args) Py_XDECREF(a);
    Py_XDECREF(r);
    return r != nullptr;
}

// The address of a tensor the call allocated (its data_ptr()).
bool read_address(PyObject* t, uint64_t& out) {
    PyObject* address = PyObject_CallMethodNoArgs(t, s_data_ptr);
    if (!address) return false;
    const unsigned long long v = PyLong_AsUnsignedLongLong(address);
    Py_DECREF(address);
    if (v == static_cast<unsigned long long>(-1) && PyErr_Occurred()) return false;
    out = v;
    return true;
}

// One returned item of a served call from the tensors it allocated (the recipe add() checked).
PyObject* build_item(PyObject* item, PyObject* const* made) {
    if (item == Py_None) Py_RETURN_NONE;
    if (PyLong_CheckExact(item)) {
        PyObject* t = made[PyLong_AsSize_t(item)];
        Py_INCREF(t);
        return t;
    }
    PyObject* const* v = &PyTuple_GET_ITEM(item, 0);  // (j, size, stride, offset)
    return PyObject_CallMethodObjArgs(made[PyLong_AsSize_t(v[0])], s_as_strided, v[1], v[2], v[3], nullptr);
}

PyObject* build_result(PyObject* recipe, PyObject* const* made) {
    PyObject* how = PyTuple_GET_ITEM(recipe, 0);
    PyObject* what = PyTuple_GET_ITEM(recipe, 1);
    if (PyUnicode_CompareWithASCIIString(how, "one") == 0) return build_item(what, made);
    const Py_ssize_t n = PyTuple_GET_SIZE(what);
    PyObject* out = PyTuple_New(n);
    if (!out) return nullptr;
    for (Py_ssize_t i = 0; i < n; ++i) {
        PyObject* x = build_item(PyTuple_GET_ITEM(what, i), made);
        if (!x) {
            Py_DECREF(out);
            return nullptr;
        }
        PyTuple_SET_ITEM(out, i, x);
    }
    return out;
}

// table(*args) -> True when the call was served (launched; a table made with returns=True gives what the call
// returns instead, built from the tensors it allocated). Otherwise the caller takes its checked path, with
// the signature as bytes (its own cache's key: the same reading, not made twice) or None when an argument is not
// what the schema allows or cannot be read (the checked path then names what is wrong, and caches nothing).
PyObject* fast_call(PyObject* self_, PyObject* const* argv, size_t nargsf, PyObject* kwnames) {
    FastCalls* self = reinterpret_cast<FastCalls*>(self_);
    const size_t n = PyVectorcall_NARGS(nargsf);
    if (!self->launcher) Py_RETURN_NONE;  // cleared by the collector: every call takes its checked path
    Signature s;
    if ((kwnames && PyTuple_GET_SIZE(kwnames)) || !read_signature(s, *self->schema, argv, n)) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    auto it = self->entries->find(s.key);
    if (it == self->entries->end())
        return PyBytes_FromStringAndSize(s.key.data(), static_cast<Py_ssize_t>(s.key.size()));
    // held from here: reading the launcher may run Python that clears the table (see Entry)
    const std::shared_ptr<Entry> entry = it->second;
    PyObject* launch_fn = PyObject_GetAttr(self->launcher, s_launch);
    PyObject* stream_fn = launch_fn ? PyObject_GetAttr(self->launcher, s_stream) : nullptr;
    PyObject* pdl = stream_fn ? PyObject_GetAttr(self->launcher, s_pdl) : nullptr;
    if (!pdl) PyErr_Clear();
    PyObject* result = nullptr;
    if (pdl && launch_fn != Py_None && stream_fn != Py_None && PyBool_Check(pdl)) {
        // the call's own allocations first, as its checked path makes them before it launches
        const size_t nf = entry->factories.size();
        PyObject* made[kMaxFresh] = {};
        uint64_t fresh[kMaxFresh] = {};
        bool ok = true;
        for (size_t j = 0; ok && j < nf; ++j) {
            made[j] = PyObject_CallNoArgs(entry->factories[j]);
            ok = made[j] && read_address(made[j], fresh[j]);
        }
        for (size_t i = 0; ok && i < entry->launches.size(); ++i)
            ok = replay(entry->launches[i], s, fresh, launch_fn, stream_fn, pdl == Py_True);
        if (ok) {
            if (entry->result) {
                result = build_result(entry->result, made);
            } else {
                result = Py_True;
                Py_INCREF(result);
            }
        }
        if (result) ++self->hits;
        for (size_t j = 0; j < nf; ++j) Py_XDECREF(made[j]);  // a workspace goes back to the allocator
        } else {  // the launcher is not bound yet: the checked path binds it
        result = PyBytes_FromStringAndSize(s.key.data(), static_cast<Py_ssize_t>(s.key.size()));
    }
    Py_XDECREF(launch_fn);
    Py_XDECREF(stream_fn);
    Py_XDECREF(pdl);
    return result;
}

bool read_u32(PyObject* o, uint32_t& out) {
    if (!PyLong_Check(o)) return false;
    const unsigned long v = PyLong_AsUnsignedLong(o);
    if ((v == static_cast<unsigned long>(-1) && PyErr_Occurred()) || v > UINT32_MAX) return false;
    out = static_cast<uint32_t>(v);
    return true;
}

// A tensor the checked call allocated through launch.empty / launch.zeros: where it was, its bytes.
struct FreshRange {
    uint64_t base = 0, bytes = 0;
};

// The patch for the address `value` found at `offset`: the first argument with that address (arguments sharing
// one, c aliasing d, share it in every call of the signature: read_tensor keys the sharing), or the one tensor
// the call allocated that holds it (any offset inside: tw / tu / attn of one allocation). An address that is both
// an argument's and inside an allocation, or inside two allocations, refuses the recording.
// Failing both, an address inside exactly one argument's span (`spans`, the arguments' extents in signature
// order, empty when unknown) whose span no other argument's overlaps: that argument's address plus the offset
// (the paged sparse MQA logits' scale words, at a fixed offset inside kv_cache). Overlapping arguments refuse it:
// the address could be derived from either, and a later call's arguments may sit apart. For the same reason an
// argument's exact address that lies inside another argument's extent is refused when the extents are known.
bool find_tensor(const Signature& s, const std::vector<FreshRange>& fresh, const std::vector<FreshRange>& spans,
                 uint64_t value, uint32_t offset, bool tmaps, std::vector<Patch>& out) {
    int found = -1;
    bool in_fresh = false;
    for (size_t j = 0; j < s.tensors && found < 0; ++j)
        if (s.ptrs[j] == value) found = static_cast<int>(j);
    for (size_t j = 0; j < fresh.size(); ++j)
        if (value >= fresh[j].base && value - fresh[j].base < fresh[j].bytes) {
            if (found >= 0) return false;
            found = static_cast<int>(j);
            in_fresh = true;
        }
    if (found >= 0) {
        // an argument's own address that lies inside another argument's extent could have been derived from that
        // one (a scale-word offset into kv_cache landing on a weights view of the same pool): refused, as below
        if (!in_fresh)  // (an argument at the very same address is keyed as sharing it: not derived)
            for (size_t j = 0; j < spans.size(); ++j)
                if (spans[j].base != value && value >= spans[j].base && value - spans[j].base < spans[j].bytes)
                    return false;
        const uint64_t at = in_fresh ? value - fresh[static_cast<size_t>(found)].base : 0;
        out.push_back({static_cast<uint32_t>(found), offset, tmaps, in_fresh, at});
        return true;
    }
    for (size_t j = 0; j < spans.size(); ++j)
        if (value >= spans[j].base && value - spans[j].base < spans[j].bytes) {
            if (found >= 0) return false;
            found = static_cast<int>(j);
        }
    if (found < 0) return false;
    const FreshRange& own = spans[static_cast<size_t>(found)];
    for (size_t j = 0; j < spans.size(); ++j)
        if (static_cast<int>(j) != found && spans[j].bytes && own.base < spans[j].base + spans[j].bytes &&
            spans[j].base < own.base + own.bytes)
            return false;
    out.push_back({static_cast<uint32_t>(found), offset, tmaps, false, value - own.base});
    return true;
}

// One record launch.launch made while recording: (handle, gx, gy, gz, block, smem, index, pdl, params, tmaps,
// pointer offsets of the parameter buffer). Every non-null pointer parameter and every tensor-map address must
// be exactly one of the call's tensors' addresses; anything else (a workspace, a temporary, an offset address)
// leaves the call on the checked path.
bool read_record(PyObject* rec, const Signature& s, const std::vector<FreshRange>& fresh,
                 const std::vector<FreshRange>& spans, Launch& l) {
    if (!PyTuple_CheckExact(rec) || PyTuple_GET_SIZE(rec) != 11) return false;
    PyObject* const* f = &PyTuple_GET_ITEM(rec, 0);
    uint32_t handle = 0;
    if (!read_u32(f[0], handle) || handle > INT32_MAX || !read_u32(f[1], l.gx) || !read_u32(f[2], l.gy) ||
        !read_u32(f[3], l.gz) || !read_u32(f[4], l.block) || !read_u32(f[5], l.smem) || !PyLong_CheckExact(f[6]) ||
        !PyBool_Check(f[7]) || !PyBytes_CheckExact(f[8]) || !PyBytes_CheckExact(f[9]) || !PyTuple_CheckExact(f[10]))
        return false;
    l.handle = static_cast<int>(handle);
    l.pdl = f[7] == Py_True;
    l.params.assign(PyBytes_AS_STRING(f[8]), static_cast<size_t>(PyBytes_GET_SIZE(f[8])));
    l.tmaps.assign(PyBytes_AS_STRING(f[9]), static_cast<size_t>(PyBytes_GET_SIZE(f[9])));
    if (l.params.size() > kMaxBuffer || l.tmaps.size() % kTmaRecord) return false;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(f[10]); ++i) {
        uint32_t off = 0;
        if (!read_u32(PyTuple_GET_ITEM(f[10], i), off) || off % 8 || static_cast<size_t>(off) + 8 > l.params.size())
            return false;  // (in size_t: a uint32 offset near 2^32 must not wrap past the check)
        uint64_t v = 0;
        std::memcpy(&v, l.params.data() + off, sizeof v);
        if (v != 0 && !find_tensor(s, fresh, spans, v, off, false, l.patches)) return false;
    }
    for (size_t r = 0; r < l.tmaps.size(); r += kTmaRecord) {
        const uint32_t off = static_cast<uint32_t>(r + kTmaAddress);
        uint64_t v = 0;
        std::memcpy(&v, l.tmaps.data() + off, sizeof v);
        if (!find_tensor(s, fresh, spans, v, off, true, l.patches)) return false;
    }
    Py_INCREF(f[6]);
    l.index = f[6];
    return true;
}

// fresh: a list of (address, bytes, factory) for the tensors the checked call allocated, in order (launch.empty /
// launch.zeros); factory() makes the next call's. False when one is not that.
bool read_fresh(PyObject* list, Entry& e, std::vector<FreshRange>& out) {
    if (!PyList_CheckExact(list) || static_cast<size_t>(PyList_GET_SIZE(list)) > kMaxFresh) return false;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(list); ++i) {
        PyObject* item = PyList_GET_ITEM(list, i);
        if (!PyTuple_CheckExact(item) || PyTuple_GET_SIZE(item) != 3 || !PyCallable_Check(PyTuple_GET_ITEM(item, 2)))
            return false;
        FreshRange r;
        r.base = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(item, 0));
        r.bytes = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(item, 1));
        if (PyErr_Occurred()) return false;
        out.push_back(r);
        PyObject* factory = PyTuple_GET_ITEM(item, 2);
        Py_INCREF(factory);
        e.factories.push_back(factory);
    }
    return true;
}

// spans: a list of (address, bytes) per argument tensor in signature order (recording's reading of the arguments'
// extents). Used only when it lines up with the signature's own tensors, address for address; otherwise left
// empty (no argument-offset patches: the recording then needs exact addresses, as before).
void read_spans(PyObject* list, const Signature& s, std::vector<FreshRange>& out) {
    if (!PyList_CheckExact(list) || static_cast<size_t>(PyList_GET_SIZE(list)) != s.tensors) return;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(list); ++i) {
        PyObject* item = PyList_GET_ITEM(list, i);
        FreshRange r;
        if (PyTuple_CheckExact(item) && PyTuple_GET_SIZE(item) == 2) {
            r.base = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(item, 0));
            r.bytes = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(item, 1));
        }
        if (PyErr_Occurred() || r.base != s.ptrs[i] || r.base == 0) {
            PyErr_Clear();
            out.clear();
            return;
        }
        out.push_back(r);
    }
}

// One returned item of a recipe: None, j, or (j, size tuple, stride tuple, offset), j < fresh.
bool check_item(PyObject* item, size_t fresh) {
    if (item == Py_None) return true;
    if (PyLong_CheckExact(item)) {
        const size_t j = PyLong_AsSize_t(item);
        return !PyErr_Occurred() && j < fresh;
    }
    if (!PyTuple_CheckExact(item) || PyTuple_GET_SIZE(item) != 4 || !PyLong_CheckExact(PyTuple_GET_ITEM(item, 0)) ||
        !PyTuple_CheckExact(PyTuple_GET_ITEM(item, 1)) || !PyTuple_CheckExact(PyTuple_GET_ITEM(item, 2)) ||
        !PyLong_CheckExact(PyTuple_GET_ITEM(item, 3)))
        return false;
    const size_t j = PyLong_AsSize_t(PyTuple_GET_ITEM(item, 0));
    return !PyErr_Occurred() && j < fresh;
}

bool check_result(PyObject* recipe, size_t fresh) {
    if (!PyTuple_CheckExact(recipe) || PyTuple_GET_SIZE(recipe) != 2 || !PyUnicode_Check(PyTuple_GET_ITEM(recipe, 0)))
        return false;
    PyObject* what = PyTuple_GET_ITEM(recipe, 1);
    if (PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(recipe, 0), "one") == 0) return check_item(what, fresh);
    if (PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(recipe, 0), "tuple") != 0 || !PyTuple_CheckExact(what))
        return false;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(what); ++i)
        if (!check_item(PyTuple_GET_ITEM(what, i), fresh)) return false;
    return true;
}

// add(args, records, fresh=[], result=None) -> bool: keep `records` (launch.launch's, from a checked call of
// `args`) under args' signature, with the tensors the call allocated (read_fresh) and, for a table made with
// returns=True, the recipe of what it returned (Entry::result; required there, refused elsewhere). False when the
// signature cannot be read or a record is not replayable (see read_record).
PyObject* fast_add(PyObject* self_, PyObject* const* argv, Py_ssize_t nargs) {
    FastCalls* self = reinterpret_cast<FastCalls*>(self_);
    if ((nargs != 2 && nargs != 4 && nargs != 5) || !PyTuple_Check(argv[0]) || !PyList_Check(argv[1])) {
        PyErr_SetString(PyExc_TypeError, "FastCalls.add(args: tuple, records: list[, fresh: list, result[, spans]])");
        return nullptr;
    }
    if (!self->launcher) Py_RETURN_FALSE;  // cleared by the collector
    auto entry = std::make_shared<Entry>();
    Entry& e = *entry;
    Signature s;
    bool ok = read_signature(s, *self->schema, &PyTuple_GET_ITEM(argv[0], 0),
                             static_cast<size_t>(PyTuple_GET_SIZE(argv[0])));
    for (size_t j = 0; ok && j < s.tensors; ++j) ok = s.ptrs[j] != 0;  // a null address is no tensor's own
    std::vector<FreshRange> fresh, spans;
    if (ok && nargs >= 4) ok = read_fresh(argv[2], e, fresh);
    if (ok && nargs == 5) read_spans(argv[4], s, spans);
    PyObject* recipe = nargs >= 4 ? argv[3] : Py_None;
    if (ok && self->returns) {
        ok = recipe != Py_None && check_result(recipe, fresh.size());
        if (ok) {
            Py_INCREF(recipe);
            e.result = recipe;
        }
    } else if (ok) {
        ok = recipe == Py_None;
    }
    const Py_ssize_t count = PyList_GET_SIZE(argv[1]);
    ok = ok && count > 0;
    for (Py_ssize_t i = 0; ok && i < count; ++i) {
        e.launches.emplace_back();
        ok = read_record(PyList_GET_ITEM(argv[1], i), s, fresh, spans, e.launches.back());
    }
    PyErr_Clear();
    if (!ok) Py_RETURN_FALSE;  // the entry, and the references it took, go with it
    if (static_cast<Py_ssize_t>(self->entries->size()) >= self->limit) clear_entries(self);
    (*self->entries)[std::move(s.key)] = std::move(entry);
    Py_RETURN_TRUE;
}

PyObject* fast_clear(PyObject* self_, PyObject*) {
    clear_entries(reinterpret_cast<FastCalls*>(self_));
    Py_RETURN_NONE;
}

Py_ssize_t fast_len(PyObject* self_) {
    return static_cast<Py_ssize_t>(reinterpret_cast<FastCalls*>(self_)->entries->size());
}

PyObject* fast_hits(PyObject* self_, void*) {
    return PyLong_FromUnsignedLongLong(reinterpret_cast<FastCalls*>(self_)->hits);
}

PyObject* fast_schema(PyObject* self_, void*) {
    const std::string& s = *reinterpret_cast<FastCalls*>(self_)->schema;
    return PyUnicode_FromStringAndSize(s.data(), static_cast<Py_ssize_t>(s.size()));
}

// FastCalls(schema: str, launcher, limit: int, returns: bool = False)
PyObject* fast_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
    const char* schema = nullptr;
    PyObject* launcher = nullptr;
    Py_ssize_t limit = 0;
    int returns = 0;
    static const char* names[] = {"schema", "launcher", "limit", "returns", nullptr};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "sOn|p", const_cast<char**>(names), &schema, &launcher, &limit,
                                     &returns))
        return nullptr;
    const std::string text(schema);
    if (text.empty() || text.find_first_not_of("TPV") != std::string::npos) {
        PyErr_SetString(PyExc_ValueError, "FastCalls schema: one letter per argument, T (tensor), P (pair), V (value)");
        return nullptr;
    }
    if (limit < 1) {
        PyErr_SetString(PyExc_ValueError, "FastCalls limit must be >= 1");
        return nullptr;
    }
    FastCalls* self = reinterpret_cast<FastCalls*>(type->tp_alloc(type, 0));
    if (!self) return nullptr;
    self->vectorcall = fast_call;
    Py_INCREF(launcher);
    self->launcher = launcher;
    self->schema = new std::string(text);
    self->entries = new std::unordered_map<std::string, std::shared_ptr<Entry>>();
    self->limit = limit;
    self->hits = 0;
    self->returns = returns != 0;
    return reinterpret_cast<PyObject*>(self);
}

// Garbage collection: a table holds its launcher and, through its entries, the factories and result recipes its
// recordings named; a factory or launcher that refers back to the table makes a cycle only the collector can free.
int fast_traverse(PyObject* self_, visitproc visit, void* arg) {
    FastCalls* self = reinterpret_cast<FastCalls*>(self_);
    Py_VISIT(Py_TYPE(self_));
    Py_VISIT(self->launcher);
    if (self->entries)
        for (const auto& kv : *self->entries) {
            for (PyObject* f : kv.second->factories) Py_VISIT(f);
            Py_VISIT(kv.second->result);
            for (const Launch& l : kv.second->launches) Py_VISIT(l.index);
        }
    return 0;
}

int fast_gc_clear(PyObject* self_) {
    FastCalls* self = reinterpret_cast<FastCalls*>(self_);
    if (self->entries) clear_entries(self);
    Py_CLEAR(self->launcher);  // a cleared table serves nothing (fast_call and add check it)
    return 0;
}

void fast_dealloc(PyObject* self_) {
    FastCalls* self = reinterpret_cast<FastCalls*>(self_);
    PyTypeObject* type = Py_TYPE(self_);
    PyObject_GC_UnTrack(self_);
    if (self->entries) {
        clear_entries(self);
        delete self->entries;
    }
    delete self->schema;
    Py_XDECREF(self->launcher);
    type->tp_free(self_);
    Py_DECREF(type);
}

PyMethodDef g_methods[] = {
    {"add", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&fast_add)), METH_FASTCALL,
     "add(args, records[, fresh, result[, spans]]) -> bool: keep a checked call's launches under args' signature"},
    {"clear", fast_clear, METH_NOARGS, "forget every entry"},
    {nullptr, nullptr, 0, nullptr}};

PyObject* fast_returns(PyObject* self_, void*) { return PyBool_FromLong(reinterpret_cast<FastCalls*>(self_)->returns); }

PyGetSetDef g_getset[] = {{"hits", fast_hits, nullptr, "calls served so far", nullptr},
                          {"returns", fast_returns, nullptr, "hits return what the call allocated", nullptr},
                          {"schema", fast_schema, nullptr, "one letter per argument (T, P, V)", nullptr},
                          {nullptr, nullptr, nullptr, nullptr, nullptr}};

PyMemberDef g_members[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(FastCalls, vectorcall), READONLY, nullptr},
    {nullptr, 0, 0, 0, nullptr}};

PyType_Slot g_slots[] = {{Py_tp_new, reinterpret_cast<void*>(fast_new)},
                         {Py_tp_dealloc, reinterpret_cast<void*>(fast_dealloc)},
                         {Py_tp_traverse, reinterpret_cast<void*>(fast_traverse)},
                         {Py_tp_clear, reinterpret_cast<void*>(fast_gc_clear)},
                         {Py_tp_call, reinterpret_cast<void*>(PyVectorcall_Call)},
                         {Py_tp_methods, g_methods},
                         {Py_tp_getset, g_getset},
                         {Py_tp_members, g_members},
                         {Py_mp_length, reinterpret_cast<void*>(fast_len)},
                         {Py_tp_doc, const_cast<char*>("FastCalls(schema, launcher, limit, returns=False): served calls by signature")},
                         {0, nullptr}};

PyType_Spec g_spec = {"deep_gemm_sm120._C.FastCalls", sizeof(FastCalls), 0,
                      Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_HAVE_GC, g_slots};

}  // namespace

int add_fast_calls(PyObject* module) {
    const struct {
        PyObject** slot;
        const char* text;
    } names[] = {{&s_dtype, "dtype"},         {&s_shape, "shape"},       {&s_stride, "stride"},
                 {&s_is_cuda, "is_cuda"},     {&s_get_device, "get_device"}, {&s_data_ptr, "data_ptr"},
                 {&s_launch, "launch"},       {&s_stream, "stream"},     {&s_pdl, "pdl"},
                 {&s_as_strided, "as_strided"}};
    for (const auto& n : names)
        if (!*n.slot && !(*n.slot = PyUnicode_InternFromString(n.text))) return -1;
    g_real_launch = PyObject_GetAttrString(module, "launch");
    if (!g_real_launch) return -1;
    PyObject* type = PyType_FromSpec(&g_spec);
    if (!type) return -1;
    if (PyModule_AddObject(module, "FastCalls", type) != 0) {
        Py_DECREF(type);
        return -1;
    }
    return 0;
}

}  // namespace dg_sm120
