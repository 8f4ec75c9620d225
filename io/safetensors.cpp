// io/safetensors.cpp — the safetensors writer (atomic, deterministic) and the validating reader.
// The format, the guarantees and the test hook are described in io/safetensors.h.
#include "multigrad/io/safetensors.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <regex>
#include <set>
#include <thread>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

namespace mg::io {
namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; multigrad writes host memory as it is");

// The largest header the Python package accepts (its MAX_HEADER_SIZE): a longer length field
// is a corrupt file, and refusing it keeps a bad length from asking for gigabytes of memory.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
// The header is padded with spaces so that the data section starts 8-byte aligned in the file.
constexpr uint64_t kHeaderAlignment = 8;
// How long the MG_TEST_PAUSE_WRITE hook sleeps: ample time for a test to kill the writer, yet
// a writer nobody kills still finishes.
constexpr int kTestPauseSeconds = 30;
constexpr const char* kMetadataKey = "__metadata__";

const char* safetensors_dtype(DType t) {
  switch (t) {
    case DType::Float32: return "F32";
    case DType::Float64: return "F64";
    case DType::Int64: return "I64";
    case DType::BFloat16: return "BF16";
    case DType::Float16: return "F16";
    case DType::Bool: return "BOOL";
  }
  MG_ERROR("safetensors: unknown dtype ", int(t));
}

bool parse_safetensors_dtype(const std::string& name, DType* out) {
  for (DType t : {DType::Float32, DType::Float64, DType::Int64, DType::BFloat16, DType::Float16, DType::Bool}) {
    if (name == safetensors_dtype(t)) {
      *out = t;
      return true;
    }
  }
  return false;
}

std::string errno_text() { return std::strerror(errno); }

// The folder that holds `path` ("." for a bare file name).
std::string parent_folder(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// ============================================================================================
// Writing
// ============================================================================================

constexpr const char* kTempInfix = ".tmp.";

// A temp file `<path>.tmp.<pid>` that becomes `path` on commit() and is removed otherwise.
class AtomicFile {
 public:
  explicit AtomicFile(const std::string& path)
      : path_(path), temp_(path + kTempInfix + std::to_string(::getpid())) {
    fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    MG_CHECK(fd_ >= 0, "save_safetensors: cannot create the temp file '", temp_, "' for '", path_,
             "': ", errno_text());
  }
  ~AtomicFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(temp_.c_str());
  }
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t nbytes) {
    const char* p = static_cast<const char*>(data);
    while (nbytes > 0) {
      const ssize_t n = ::write(fd_, p, nbytes);
      if (n < 0 && errno == EINTR) continue;
      MG_CHECK(n > 0, "save_safetensors: writing '", temp_, "' failed: ", n < 0 ? errno_text() : "wrote nothing");
      p += n;
      nbytes -= size_t(n);
    }
  }

  // fsync, close, rename over the target, fsync the folder so the rename itself is durable.
  void commit() {
    MG_CHECK(::fsync(fd_) == 0, "save_safetensors: fsync of '", temp_, "' failed: ", errno_text());
    const int fd = fd_;
    fd_ = -1;
    MG_CHECK(::close(fd) == 0, "save_safetensors: closing '", temp_, "' failed: ", errno_text());
    MG_CHECK(::rename(temp_.c_str(), path_.c_str()) == 0, "save_safetensors: cannot rename '", temp_,
             "' to '", path_, "': ", errno_text());
    committed_ = true;
    const std::string folder = parent_folder(path_);
    const int dir = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    MG_CHECK(dir >= 0, "save_safetensors: cannot open the folder '", folder, "' to fsync it: ", errno_text());
    // Some file systems cannot fsync a folder (EINVAL); the rename is then as durable as they allow.
    const bool synced = ::fsync(dir) == 0 || errno == EINVAL;
    const std::string why = synced ? "" : errno_text();
    ::close(dir);
    MG_CHECK(synced, "save_safetensors: fsync of the folder '", folder, "' failed: ", why);
  }

 private:
  std::string path_, temp_;
  int fd_ = -1;
  bool committed_ = false;
};

// Writes the data section through an AtomicFile and runs the MG_TEST_PAUSE_WRITE hook once
// `pause_at` data bytes are out.
class DataWriter {
 public:
  DataWriter(AtomicFile& file, uint64_t data_bytes) : file_(file) {
    if (const char* p = std::getenv("MG_TEST_PAUSE_WRITE"); p != nullptr && *p != '\0') {
      pause_path_ = p;
      pause_at_ = data_bytes / 2;
      paused_ = false;
      if (pause_at_ == 0) pause();
    }
  }

  void write(const void* data, uint64_t nbytes) {
    const char* p = static_cast<const char*>(data);
    while (nbytes > 0) {
      uint64_t chunk = nbytes;
      if (!paused_) chunk = std::min(chunk, pause_at_ - written_);
      file_.write(p, chunk);
      written_ += chunk;
      p += chunk;
      nbytes -= chunk;
      if (!paused_ && written_ == pause_at_) pause();
    }
  }

 private:
  void pause() {
    paused_ = true;
    const int fd = ::open(pause_path_.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0666);
    MG_CHECK(fd >= 0, "save_safetensors: MG_TEST_PAUSE_WRITE: cannot create '", pause_path_, "': ", errno_text());
    ::close(fd);
    std::this_thread::sleep_for(std::chrono::seconds(kTestPauseSeconds));
  }

  AtomicFile& file_;
  std::string pause_path_;
  uint64_t pause_at_ = 0, written_ = 0;
  bool paused_ = true;
};

uint64_t byte_size(const Tensor& t) { return uint64_t(t.numel()) * t.element_size(); }

// The header JSON (before padding): __metadata__, then each tensor in name order with its
// offsets in a data section that holds the tensors back to back in the same order.
std::string make_header(const TensorMap& tensors, const Metadata& metadata) {
  using Json = nlohmann::ordered_json;
  Json header = Json::object();
  if (!metadata.empty()) {
    Json meta = Json::object();
    for (const auto& [key, value] : metadata) meta[key] = value;
    header[kMetadataKey] = std::move(meta);
  }
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    Json entry = Json::object();
    entry["dtype"] = safetensors_dtype(t.dtype());
    entry["shape"] = t.shape();
    entry["data_offsets"] = {offset, offset + byte_size(t)};
    header[name] = std::move(entry);
    offset += byte_size(t);
  }
  try {
    return header.dump();
  } catch (const nlohmann::json::exception& e) {
    MG_ERROR("save_safetensors: a tensor name or metadata string is not valid UTF-8: ", e.what());
  }
}

// ============================================================================================
// Reading
// ============================================================================================

template <class... Args>
[[noreturn]] void bad_file(const std::string& path, const Args&... args) {
  MG_ERROR("load_safetensors: '", path, "': ", args...);
}

// A file opened for reading, closed on scope exit.
class InputFile {
 public:
  explicit InputFile(const std::string& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) bad_file(path, "cannot open: ", errno_text());
    struct stat st {};
    const bool stat_ok = ::fstat(fd_, &st) == 0;
    const std::string why = stat_ok ? "" : errno_text();
    if (!stat_ok || S_ISDIR(st.st_mode)) {
      ::close(fd_);  // the destructor does not run when the constructor throws
      if (!stat_ok) bad_file(path, "cannot stat: ", why);
      bad_file(path, "is a folder, not a file");
    }
    size_ = uint64_t(st.st_size);
  }
  ~InputFile() { ::close(fd_); }
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  uint64_t size() const { return size_; }

  // Reads exactly nbytes at `offset` (the caller has checked that they lie inside the file).
  void read(void* out, uint64_t nbytes, uint64_t offset) const {
    char* p = static_cast<char*>(out);
    while (nbytes > 0) {
      const ssize_t n = ::pread(fd_, p, nbytes, off_t(offset));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) bad_file(path_, "read failed at byte ", offset, ": ", errno_text());
      if (n == 0) bad_file(path_, "the file ended at byte ", offset, " while reading (did it change?)");
      p += n;
      offset += uint64_t(n);
      nbytes -= uint64_t(n);
    }
  }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// One header entry, validated on its own.
struct Entry {
  std::string name;
  DType dtype = DType::Float32;
  Shape shape;
  uint64_t begin = 0, end = 0;
};

// Parses the header JSON, rejecting syntax errors and any object with a key twice (nlohmann
// would keep the last silently; the Python package rejects such files).
nlohmann::json parse_header(const std::string& path, const std::string& text) {
  std::vector<std::set<std::string>> open_objects;  // keys seen in each enclosing object
  std::string duplicate;
  auto on_event = [&](int, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    if (event == E::object_start) open_objects.emplace_back();
    if (event == E::object_end) open_objects.pop_back();
    if (event == E::key && !open_objects.back().insert(parsed.get<std::string>()).second && duplicate.empty())
      duplicate = parsed.get<std::string>();
    return true;
  };
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text, on_event);
  } catch (const nlohmann::json::exception& e) {
    bad_file(path, "the header is not valid JSON: ", e.what());
  }
  if (!duplicate.empty()) bad_file(path, "the header names '", duplicate, "' twice");
  if (!header.is_object()) bad_file(path, "the header is a JSON ", header.type_name(), ", expected an object");
  return header;
}

// A non-negative JSON integer (at most `max`), or an error naming `what`.
uint64_t json_uint(const std::string& path, const nlohmann::json& v, const std::string& what, uint64_t max) {
  if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0))
    bad_file(path, what, " is ", v.dump(), ", expected a non-negative integer");
  const uint64_t u = v.get<uint64_t>();
  if (u > max) bad_file(path, what, " is ", u, ", larger than ", max);
  return u;
}

Metadata parse_metadata(const std::string& path, const nlohmann::json& meta) {
  if (!meta.is_object()) bad_file(path, "__metadata__ is a JSON ", meta.type_name(), ", expected an object of strings");
  Metadata out;
  for (const auto& [key, value] : meta.items()) {
    if (!value.is_string())
      bad_file(path, "__metadata__ value of '", key, "' is ", value.dump(), ", expected a string");
    out[key] = value.get<std::string>();
  }
  return out;
}

Entry parse_entry(const std::string& path, const std::string& name, const nlohmann::json& info,
                  uint64_t data_bytes) {
  const std::string where = "tensor '" + name + "'";
  if (!info.is_object()) bad_file(path, where, " is a JSON ", info.type_name(), ", expected an object");
  for (const auto& [key, value] : info.items())
    if (key != "dtype" && key != "shape" && key != "data_offsets")
      bad_file(path, where, " has an unknown field '", key, "'");
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!info.contains(key)) bad_file(path, where, " has no '", key, "'");

  Entry e;
  e.name = name;
  const nlohmann::json& dtype = info["dtype"];
  if (!dtype.is_string() || !parse_safetensors_dtype(dtype.get<std::string>(), &e.dtype))
    bad_file(path, where, ": dtype ", dtype.dump(), " is not one of F32, F64, I64, BF16, F16, BOOL");

  const nlohmann::json& shape = info["shape"];
  if (!shape.is_array()) bad_file(path, where, ": shape ", shape.dump(), " is not a list");
  uint64_t numel = 1;
  bool overflow = false;
  for (size_t d = 0; d < shape.size(); ++d) {
    const uint64_t size =
        json_uint(path, shape[d], where + ": shape " + shape.dump() + " dimension " + std::to_string(d),
                  uint64_t(INT64_MAX));
    e.shape.push_back(int64_t(size));
    overflow = overflow || __builtin_mul_overflow(numel, size, &numel);
  }
  uint64_t nbytes = 0;
  overflow = overflow || __builtin_mul_overflow(numel, uint64_t(dtype_size(e.dtype)), &nbytes);
  if (overflow) bad_file(path, where, ": shape ", e.shape, " of ", dtype.get<std::string>(), " overflows 64 bits");

  const nlohmann::json& offsets = info["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2)
    bad_file(path, where, ": data_offsets ", offsets.dump(), " is not a list of two integers");
  e.begin = json_uint(path, offsets[0], where + ": data_offsets begin", UINT64_MAX);
  e.end = json_uint(path, offsets[1], where + ": data_offsets end", UINT64_MAX);
  if (e.begin > e.end) bad_file(path, where, ": data_offsets [", e.begin, ", ", e.end, "] begin after end");
  if (e.end > data_bytes)
    bad_file(path, where, ": data_offsets [", e.begin, ", ", e.end, "] end past the data section (", data_bytes,
             " bytes)");
  if (e.end - e.begin != nbytes)
    bad_file(path, where, ": data_offsets [", e.begin, ", ", e.end, "] span ", e.end - e.begin,
             " bytes, but shape ", e.shape, " of ", dtype.get<std::string>(), " needs ", nbytes);
  return e;
}

// The tensors must tile [0, data_bytes) exactly, in offset order, as the Python package writes them.
void check_tiling(const std::string& path, std::vector<Entry>& entries, uint64_t data_bytes) {
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  uint64_t covered = 0;
  const Entry* previous = nullptr;
  for (const Entry& e : entries) {
    if (e.begin < covered)
      bad_file(path, "data_offsets of tensor '", e.name, "' [", e.begin, ", ", e.end, "] overlap tensor '",
               previous->name, "' [", previous->begin, ", ", previous->end, "]");
    if (e.begin > covered)
      bad_file(path, "data_offsets leave a gap: bytes [", covered, ", ", e.begin, ") before tensor '", e.name,
               "' belong to no tensor");
    covered = e.end;
    previous = &e;
  }
  if (covered != data_bytes)
    bad_file(path, data_bytes - covered, " trailing bytes after the last tensor (the tensors cover ", covered,
             " of ", data_bytes, " data bytes)");
}

void check_bool_bytes(const std::string& path, const Entry& e, const Tensor& t) {
  const auto* bytes = static_cast<const unsigned char*>(t.data_ptr());
  for (int64_t i = 0; i < t.numel(); ++i)
    if (bytes[i] > 1)
      bad_file(path, "tensor '", e.name, "': BOOL element ", i, " is byte ", int(bytes[i]), ", not 0 or 1");
}

}  // namespace

void save_safetensors(const std::string& path, const TensorMap& tensors, const Metadata& metadata) {
  for (const auto& [name, t] : tensors) {
    MG_CHECK(!name.empty(), "save_safetensors: '", path, "': a tensor name is empty");
    MG_CHECK(name != kMetadataKey, "save_safetensors: '", path, "': '", kMetadataKey,
             "' is reserved and cannot name a tensor");
    MG_CHECK(t.defined(), "save_safetensors: '", path, "': tensor '", name, "' is undefined");
  }
  std::string header = make_header(tensors, metadata);
  header.append((kHeaderAlignment - header.size() % kHeaderAlignment) % kHeaderAlignment, ' ');
  uint64_t data_bytes = 0;
  for (const auto& [name, t] : tensors) data_bytes += byte_size(t);

  AtomicFile file(path);
  const uint64_t header_length = header.size();  // little-endian on this host (static_assert above)
  file.write(&header_length, sizeof(header_length));
  file.write(header.data(), header.size());
  DataWriter data(file, data_bytes);
  for (const auto& [name, t] : tensors) {
    // detach(): copying a parameter for the file is no step of the model, so nothing is recorded.
    Tensor host = t.detach();
    if (host.device().is_cuda()) host = host.to(Device(DeviceType::CPU, 0));
    host = host.contiguous();
    if (host.numel() > 0) data.write(host.data_ptr(), byte_size(host));
  }
  file.commit();
}

std::vector<std::string> remove_stale_temp_files(const std::string& folder) {
  namespace fs = std::filesystem;
  static const std::regex kTempName(R"(.+\.tmp\.([0-9]{1,9}))");
  std::vector<std::string> removed;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(folder, ec)) {
    std::smatch match;
    const std::string name = entry.path().filename().string();
    if (!entry.is_regular_file() || !std::regex_match(name, match, kTempName)) continue;
    // kill(pid, 0) probes without signalling: ESRCH means no such process.
    const pid_t pid = pid_t(std::stol(match[1].str()));
    if (pid != ::getpid() && (::kill(pid, 0) == 0 || errno != ESRCH)) continue;
    if (fs::remove(entry.path(), ec)) removed.push_back(entry.path().string());
  }
  return removed;
}

namespace {

// The header of an open file, its length checked, and where the data section starts.
struct Header {
  nlohmann::json json;
  uint64_t data_start = 0, data_bytes = 0;
};

Header read_header(const std::string& path, InputFile& file) {
  if (file.size() < sizeof(uint64_t))
    bad_file(path, "the file has ", file.size(), " bytes, fewer than the 8 of the header length");
  uint64_t header_length = 0;
  file.read(&header_length, sizeof(header_length), 0);
  const uint64_t after_length = file.size() - sizeof(uint64_t);
  if (header_length > after_length)
    bad_file(path, "header length ", header_length, " exceeds the ", after_length, " bytes after the length field");
  if (header_length > kMaxHeaderBytes)
    bad_file(path, "header length ", header_length, " exceeds the limit of ", kMaxHeaderBytes, " bytes");
  std::string text(header_length, '\0');
  file.read(text.data(), header_length, sizeof(uint64_t));
  const uint64_t data_start = sizeof(uint64_t) + header_length;
  return {parse_header(path, text), data_start, file.size() - data_start};
}

}  // namespace

Metadata read_safetensors_metadata(const std::string& path) {
  InputFile file(path);
  const Header header = read_header(path, file);
  const auto meta = header.json.find(kMetadataKey);
  return meta == header.json.end() ? Metadata{} : parse_metadata(path, *meta);
}

SafetensorsFile load_safetensors(const std::string& path, const Device& device) {
  check_device_exists(device);
  InputFile file(path);
  const auto [header, data_start, data_bytes] = read_header(path, file);

  SafetensorsFile out;
  std::vector<Entry> entries;
  for (const auto& [key, value] : header.items()) {
    if (key == kMetadataKey)
      out.metadata = parse_metadata(path, value);
    else
      entries.push_back(parse_entry(path, key, value, data_bytes));
  }
  check_tiling(path, entries, data_bytes);

  // CPU devices share the host's address space: read straight into the tensor. A CUDA tensor
  // is read into host memory and copied.
  const Device host_device = device.is_cpu() ? device : Device(DeviceType::CPU, 0);
  for (const Entry& e : entries) {
    Tensor t = Tensor::empty(e.shape, {e.dtype, host_device});
    if (e.end > e.begin) file.read(t.data_ptr(), e.end - e.begin, data_start + e.begin);
    if (e.dtype == DType::Bool) check_bool_bytes(path, e, t);
    out.tensors.emplace(e.name, device.is_cpu() ? t : t.to(device));
  }
  return out;
}

}  // namespace mg::io
