// torch.save-compatible tensor dictionaries, through LibTorch's pickler. torch::pickle_save
// tags typed containers with torch.jit._pickle.restore_type_tag, which Python's
// torch.load(weights_only=True) (the default since torch 2.6) refuses; so the pickle is made
// here without aggregate tags and packed into the same zip archive torch.save writes.
#include "checkpoint/tensor_file.h"

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/pickler.h>
#include <torch/csrc/jit/serialization/unpickler.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <set>

#include "base/error.h"
#include "base/fsutil.h"

namespace dlrun::ckpt {

std::vector<char> tensors_to_bytes(const TensorDict& tensors) {
  c10::Dict<std::string, at::Tensor> dict;
  std::set<std::string> seen;
  for (const auto& [name, t] : tensors) {
    if (!seen.insert(name).second) fail_runtime("tensor file: duplicate tensor name '{}'", name);
    dict.insert(name, t.device().is_cpu() ? t.contiguous() : t.to(torch::kCPU).contiguous());
  }
  std::vector<char> pickle;
  torch::jit::Pickler pickler([&](const char* p, size_t n) { pickle.insert(pickle.end(), p, p + n); },
                              /*tensor_table=*/nullptr, /*type_renamer=*/nullptr,
                              /*memoized_class_types=*/nullptr, /*get_tensor_id=*/nullptr,
                              /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(c10::IValue(dict));
  pickler.stop();
  std::vector<char> out;
  out.reserve(pickle.size());
  {
    caffe2::serialize::PyTorchStreamWriter writer([&](const void* p, size_t n) {
      const char* c = static_cast<const char*>(p);
      out.insert(out.end(), c, c + n);
      return n;
    });
    torch::jit::writeArchiveAndTensors("data", pickle.data(), pickle.size(), pickler.tensorData(), writer);
  }  // the writer finishes the zip (central directory) when destroyed
  return out;
}

namespace {

/// One opcode of a pickle: its byte range and, for GLOBAL and the memo operations, the text
/// or index it carries.
struct Op {
  unsigned char code = 0;
  size_t begin = 0, end = 0;
  std::string global;       ///< GLOBAL: "module\nname"
  int64_t memo = -1;        ///< PUT, BINPUT, LONG_BINPUT, GET, BINGET, LONG_BINGET: the index
};

// A walk over the pickle's opcodes before LibTorch's unpickler runs it. The unpickler trusts
// the memo indices it is given: LONG_BINPUT with index 2^31 resizes its memo table to 2^31
// entries (32 GB). An index cannot legitimately exceed the number of opcodes, and so the
// pickle's size; every length must fit what is left. Unknown opcodes are refused (LibTorch
// refuses them too). Throws std::runtime_error with what is wrong; returns the opcodes.
std::vector<Op> walk_pickle(const unsigned char* p, size_t n) {
  std::vector<Op> ops;
  size_t i = 0;
  auto need = [&](uint64_t k) {
    if (k > n - i) throw std::runtime_error(fmt::format("pickle truncated at byte {} (needs {} more)", i, k));
  };
  auto le = [&](int k) {
    need(static_cast<uint64_t>(k));
    uint64_t v = 0;
    for (int b = k - 1; b >= 0; --b) v = (v << 8) | p[i + static_cast<size_t>(b)];
    i += static_cast<size_t>(k);
    return v;
  };
  auto line = [&]() -> std::string {
    const void* nl = std::memchr(p + i, '\n', n - i);
    if (!nl) throw std::runtime_error("pickle truncated in a text argument");
    const size_t len = static_cast<const unsigned char*>(nl) - (p + i);
    std::string s(reinterpret_cast<const char*>(p + i), len);
    i += len + 1;
    return s;
  };
  auto memo = [&](uint64_t index) {
    if (index > n) throw std::runtime_error(fmt::format("pickle memo index {} in a {}-byte pickle", index, n));
    return static_cast<int64_t>(index);
  };
  while (i < n) {
    Op op;
    op.begin = i;
    op.code = p[i++];
    switch (op.code) {
      case '.': op.end = i; ops.push_back(op); return ops;  // STOP
      case '(': case '0': case '1': case '2': case 'N': case 'R': case 'a': case 'b': case 'd': case '}':
      case 'e': case 'l': case ']': case 'o': case 's': case 't': case ')': case 'u': case 'Q': case 0x81:
      case 0x85: case 0x86: case 0x87: case 0x88: case 0x89: case 0x8f: case 0x90: case 0x91: case 0x92:
      case 0x93: case 0x94:
        break;
      case 'F': case 'I': case 'L': case 'P': case 'S': case 'V': line(); break;
      case 'p': case 'g': op.memo = memo(std::strtoull(line().c_str(), nullptr, 10)); break;
      case 'c': case 'i': op.global = line(); op.global += "\n" + line(); break;
      case 'K': case 0x80: case 0x82: le(1); break;
      case 'h': case 'q': op.memo = memo(le(1)); break;
      case 'U': case 'C': case 0x8a: case 0x8c: { const uint64_t k = le(1); need(k); i += k; break; }
      case 'M': case 0x83: le(2); break;
      case 'J': case 0x84: le(4); break;
      case 'j': case 'r': op.memo = memo(le(4)); break;
      case 'T': case 'X': case 'B': case 0x8b: { const uint64_t k = le(4); need(k); i += k; break; }
      case 'G': case 0x95: le(8); break;
      case 0x8d: case 0x8e: { const uint64_t k = le(8); need(k); i += k; break; }
      default: throw std::runtime_error(fmt::format("unsupported pickle opcode 0x{:02x} at byte {}", op.code, i - 1));
    }
    op.end = i;
    ops.push_back(op);
  }
  throw std::runtime_error("pickle without a STOP opcode");
}

/// The pickle with every collections.OrderedDict made a plain dict. torch.save of a module's
/// state_dict() (torchvision's published weights are such files) pickles an OrderedDict, with
/// its `_metadata` set by BUILD; LibTorch's unpickler turns OrderedDict() into None (it only
/// expects the empty hooks dict of a tensor) and has no POP. So the opcodes are replayed on a
/// model of the stack that knows where each value's construction began: each `OrderedDict()`
/// call (the class, an empty tuple, REDUCE) becomes EMPTY_DICT, and each BUILD is dropped with
/// the ops that built its state (here only the dict's attributes). The items themselves are set
/// by SETITEM(S) as in any dict. Unchanged without an OrderedDict; a use of the class it does not
/// recognise is left for the unpickler to refuse.
std::string plain_dicts(const unsigned char* p, const std::vector<Op>& ops) {
  const std::string whole(reinterpret_cast<const char*>(p), ops.empty() ? 0 : ops.back().end);
  bool any = false;
  for (const Op& op : ops) any |= op.global == "collections\nOrderedDict";
  if (!any) return whole;
  struct Slot {
    size_t start;         ///< the op where this value's construction began
    bool mark = false;    ///< a MARK
    bool od_class = false;
  };
  std::vector<Slot> stack;
  std::set<int64_t> class_memo;
  std::vector<std::string> out(ops.size());
  for (size_t k = 0; k < ops.size(); ++k) out[k].assign(whole, ops[k].begin, ops[k].end - ops[k].begin);
  auto pop = [&] {
    if (stack.empty()) throw std::runtime_error("pickle stack underflow");
    Slot s = stack.back();
    stack.pop_back();
    return s;
  };
  auto pop_to_mark = [&] {
    while (!stack.empty() && !stack.back().mark) stack.pop_back();
    return pop();  // the mark: where the group began
  };
  auto drop = [&](size_t from, size_t to, const std::string& with) {
    for (size_t k = from; k <= to; ++k) out[k].clear();
    out[to] = with;
  };
  for (size_t k = 0; k < ops.size(); ++k) {
    const Op& op = ops[k];
    switch (op.code) {
      case '(': stack.push_back({k, true}); break;
      case 'c': case 'i': stack.push_back({k, false, op.global == "collections\nOrderedDict"}); break;
      case 'g': case 'h': case 'j': stack.push_back({k, false, class_memo.count(op.memo) > 0}); break;
      case 'p': case 'q': case 'r':
        if (!stack.empty() && stack.back().od_class) class_memo.insert(op.memo);
        break;
      case 't': case 'l': case 'd': case 'o': case 0x91: stack.push_back({pop_to_mark().start}); break;
      case 'e': case 'u': case '1': case 0x90: pop_to_mark(); break;
      case 0x93: pop(); stack.push_back({pop().start}); break;
      case 0x92: pop(); pop(); stack.push_back({pop().start}); break;
      case 0x85: stack.push_back({pop().start}); break;
      case 0x86: pop(); stack.push_back({pop().start}); break;
      case 0x87: pop(); pop(); stack.push_back({pop().start}); break;
      case 'a': case '0': pop(); break;
      case 's': pop(); pop(); break;
      case '2': if (stack.empty()) throw std::runtime_error("pickle stack underflow"); stack.push_back(stack.back()); break;
      case 'R': case 0x81: {
        const Slot args = pop(), callable = pop();
        const bool empty_call = args.start + 1 == k && ops[args.start].code == ')';
        if (callable.od_class && empty_call) drop(callable.start, k, "}");  // OrderedDict() -> {}
        stack.push_back({callable.start});
        break;
      }
      case 'b': drop(pop().start, k, ""); break;  // BUILD: the state and the BUILD go
      case 'Q': stack.push_back({pop().start}); break;
      case '.': case 0x80: case 0x95: case 0x94: break;
      default: stack.push_back({k}); break;  // every other opcode walk_pickle accepts pushes one value
    }
  }
  std::string plain;
  for (const auto& piece : out) plain += piece;
  return plain;
}

/// In-memory archive reader whose reads stop at the end of the bytes. (LibTorch's own
/// MemoryReadAdapter copies whatever range the zip reader asks for: a truncated archive made
/// it read past the buffer -- found by fuzz/checkpoint_fuzz.cpp under ASan.)
class BoundedReader final : public caffe2::serialize::ReadAdapterInterface {
 public:
  BoundedReader(const char* data, size_t size) : data_(data), size_(size) {}
  size_t size() const override { return size_; }
  size_t read(uint64_t pos, void* buf, size_t n, const char* /*what*/) const override {
    if (pos >= size_) return 0;
    n = std::min<uint64_t>(n, size_ - pos);
    std::memcpy(buf, data_ + pos, n);
    return n;
  }

 private:
  const char* data_;
  size_t size_;
};

/// Every record's size as the archive's central directory states it, found the way miniz (the
/// zip reader inside LibTorch) finds it: the last end-of-directory record, the zip64 one when
/// its locator sits in front, and a record's zip64 extra field where a size reads 0xFFFFFFFF.
/// LibTorch's reader allocates a record's stated size before reading it -- even in its
/// constructor, for the version record -- so a 60-byte file claiming a 4 GB record asked for
/// 4 GB (found by fuzz/weights_fuzz.cpp). A record may not claim more bytes than the file has
/// (torch.save stores them uncompressed). Throws std::runtime_error naming what is wrong.
void check_record_sizes(const std::vector<char>& bytes) {
  const size_t size = bytes.size();
  auto at = [&](uint64_t pos, int k) {
    if (pos > size || static_cast<uint64_t>(k) > size - pos)
      throw std::runtime_error(fmt::format("zip directory points past the end of the file (byte {})", pos));
    uint64_t v = 0;
    for (int b = k - 1; b >= 0; --b) v = (v << 8) | static_cast<uint8_t>(bytes[pos + static_cast<size_t>(b)]);
    return v;
  };
  if (size < 22) throw std::runtime_error("too short for a zip archive");
  // miniz looks back at most 64 KiB (the longest comment) and a read buffer of 4 KiB from the end.
  const size_t lowest = size > 22 + 65535 + 4096 ? size - (22 + 65535 + 4096) : 0;
  size_t eocd = size - 22 + 1;
  while (eocd-- > lowest && at(eocd, 4) != 0x06054b50) {
  }
  if (eocd + 1 == lowest || eocd == static_cast<size_t>(-1) || at(eocd, 4) != 0x06054b50)
    throw std::runtime_error("no zip end-of-directory record");
  uint64_t entries = at(eocd + 10, 2), cdir_size = at(eocd + 12, 4), cdir = at(eocd + 16, 4);
  if (eocd >= 76 && at(eocd - 20, 4) == 0x07064b50) {
    const uint64_t z64 = at(eocd - 20 + 8, 8);
    if (z64 <= size - 56 && at(z64, 4) == 0x06064b50) {
      entries = at(z64 + 32, 8);
      cdir_size = at(z64 + 40, 8);
      cdir = at(z64 + 48, 8);
    }
  }
  if (cdir > size || cdir_size > size - cdir) throw std::runtime_error("zip directory lies outside the file");
  const uint64_t end = cdir + cdir_size;
  for (uint64_t i = 0, p = cdir; i < entries; ++i) {
    if (p + 46 > end || at(p, 4) != 0x02014b50) throw std::runtime_error("damaged zip directory entry");
    const uint64_t name_len = at(p + 28, 2), extra_len = at(p + 30, 2), comment_len = at(p + 32, 2);
    const uint64_t total = 46 + name_len + extra_len + comment_len;
    if (total > end - p) throw std::runtime_error("damaged zip directory entry");
    const std::string name(bytes.data() + p + 46, name_len);
    uint64_t record = at(p + 24, 4);
    const bool wide[3] = {record == 0xffffffff, at(p + 20, 4) == 0xffffffff, at(p + 42, 4) == 0xffffffff};
    if (wide[0] || wide[1] || wide[2]) {  // the zip64 extra field (id 1) holds the 8-byte values in order
      for (uint64_t e = p + 46 + name_len, stop = e + extra_len; e + 4 <= stop;) {
        const uint64_t id = at(e, 2), len = at(e + 2, 2);
        if (len > stop - e - 4) break;
        if (id == 1) {
          if (wide[0] && len >= 8) record = at(e + 4, 8);
          break;
        }
        e += 4 + len;
      }
    }
    if (record > size)
      throw std::runtime_error(fmt::format("record {} claims {} bytes in a {}-byte file", name, record, size));
    p += total;
  }
}

}  // namespace

TensorDict tensors_from_bytes(const std::vector<char>& bytes, const std::string& what) {
  c10::IValue v;
  try {
    // The archive and its pickle are checked with bounded reads before LibTorch's reader sees
    // them: a record may not claim more bytes than the file has, and the pickle must walk.
    check_record_sizes(bytes);
    caffe2::serialize::PyTorchStreamReader reader(std::make_shared<BoundedReader>(bytes.data(), bytes.size()));
    if (!reader.hasRecord("data.pkl")) throw std::runtime_error("no data.pkl record in the archive");
    const auto [data, size] = reader.getRecord("data.pkl");
    const auto* pickle = static_cast<const unsigned char*>(data.get());
    const std::string plain = plain_dicts(pickle, walk_pickle(pickle, size));
    // torch::pickle_load's steps (readArchiveAndTensors), on the plain pickle and the bounded
    // reader: the storages are the records data/<key>.
    size_t at = 0;
    torch::jit::Unpickler unpickler(
        [&](char* buf, size_t n) {
          n = std::min(n, plain.size() - at);
          std::memcpy(buf, plain.data() + at, n);
          at += n;
          return n;
        },
        /*type_resolver=*/nullptr, /*obj_loader=*/nullptr,
        [&](const std::string& name) { return std::get<0>(reader.getRecord("data/" + name)); },
        /*device=*/std::nullopt);
    unpickler.set_version(reader.version());
    v = unpickler.parse_ivalue();
  } catch (const c10::Error& e) {
    fail_input("{}: not a readable torch file: {}", what, e.what_without_backtrace());
  } catch (const std::exception& e) {  // LibTorch's reader also throws std:: errors on damaged archives
    fail_input("{}: not a readable torch file: {}", what, e.what());
  }
  DLRUN_CHECK_INPUT(v.isGenericDict(), "{}: expected a dict of tensors, found {}", what, v.tagKind());
  TensorDict out;
  for (const auto& item : v.toGenericDict()) {
    DLRUN_CHECK_INPUT(item.key().isString(), "{}: a key is not a string ({})", what, item.key().tagKind());
    const std::string name = item.key().toStringRef();
    DLRUN_CHECK_INPUT(item.value().isTensor(), "{}: entry '{}' is not a tensor ({})", what, name,
                      item.value().tagKind());
    out.emplace_back(name, item.value().toTensor());
  }
  return out;
}

void write_tensor_file(const std::string& path, const TensorDict& tensors) {
  const auto bytes = tensors_to_bytes(tensors);
  fsutil::write_file_atomic(path, std::string_view(bytes.data(), bytes.size()));
}

TensorDict load_tensor_file(const std::string& path) {
  return tensors_from_bytes(fsutil::read_bytes(path), path);
}

}  // namespace dlrun::ckpt
