// Keras 3's HDF5 weights layout (keras/src/saving/saving_lib.py, H5IOStore): for each saveable
// with variables, a group `<path>/vars` holding one dataset per variable, named "0", "1", ... in
// the saveable's variable order, and the attribute "name". Written and read in memory through
// HDF5's core driver; Debian's HDF5 is built without thread safety, so one call at a time.
#include <hdf5.h>

#include <algorithm>
#include <cstring>
#include <mutex>

#include "tandem/keras_io.h"

namespace tandem::io {
namespace {

std::mutex& h5_mutex() {
  static std::mutex m;
  return m;
}

// An HDF5 identifier closed by its own close function.
class Id {
 public:
  Id(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~Id() {
    if (id_ >= 0) close_(id_);
  }
  Id(const Id&) = delete;
  Id& operator=(const Id&) = delete;
  operator hid_t() const { return id_; }  // NOLINT: passed straight to HDF5's calls
  bool ok() const { return id_ >= 0; }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

void check(herr_t rc, const char* what, const std::string& where) {
  if (rc < 0) fail("{}: HDF5 failed to {}", where, what);
}

// HDF5 prints its error stack to stderr by default; Tandem reports errors itself.
void quiet() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

void write_name(hid_t group, const std::string& name) {
  Id type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type, H5T_VARIABLE);
  H5Tset_cset(type, H5T_CSET_UTF8);
  Id space(H5Screate(H5S_SCALAR), H5Sclose);
  Id attr(H5Acreate2(group, "name", type, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  const char* value = name.c_str();
  check(H5Awrite(attr, type, &value), "write the attribute \"name\"", name);
}

std::string read_name(hid_t group) {
  if (H5Aexists(group, "name") <= 0) return "";
  Id attr(H5Aopen(group, "name", H5P_DEFAULT), H5Aclose);
  Id type(H5Aget_type(attr), H5Tclose);
  if (!attr.ok() || H5Tget_class(type) != H5T_STRING) return "";
  if (H5Tis_variable_str(type) > 0) {
    Id mem(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(mem, H5T_VARIABLE);
    H5Tset_cset(mem, H5Tget_cset(type));
    char* value = nullptr;
    if (H5Aread(attr, mem, &value) < 0 || value == nullptr) return "";
    std::string out(value);
    H5free_memory(value);
    return out;
  }
  size_t size = H5Tget_size(type);
  std::string out(size, '\0');
  if (H5Aread(attr, type, out.data()) < 0) return "";
  return out.substr(0, out.find('\0'));
}

void write_dataset(hid_t group, const std::string& key, const Tensor& value, const std::string& where) {
  Tensor t = value.to(Device::cpu()).contiguous();
  std::vector<hsize_t> dims(t.shape().begin(), t.shape().end());
  Id space(dims.empty() ? H5Screate(H5S_SCALAR) : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
           H5Sclose);
  hid_t file_type = H5T_IEEE_F32LE, mem_type = H5T_NATIVE_FLOAT;
  if (t.dtype() == DType::Int32) file_type = H5T_STD_I64LE, mem_type = H5T_NATIVE_INT32;
  else if (t.dtype() != DType::Float32)
    fail("{}: \"{}\" is {}, expected float32 or int32", where, key, dtype_name(t.dtype()));
  Id set(H5Dcreate2(group, key.c_str(), file_type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Dclose);
  if (!set.ok()) fail("{}: HDF5 cannot create dataset \"{}\"", where, key);
  if (t.numel() > 0) check(H5Dwrite(set, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, t.raw()), "write", where);
}

Tensor read_dataset(hid_t group, const std::string& key, const std::string& where) {
  Id set(H5Dopen2(group, key.c_str(), H5P_DEFAULT), H5Dclose);
  if (!set.ok()) fail("{}: \"{}\" is not a dataset", where, key);
  Id space(H5Dget_space(set), H5Sclose);
  int rank = H5Sget_simple_extent_ndims(space);
  if (rank < 0 || rank > Shape::kMaxRank)
    fail("{}: dataset \"{}\" has rank {}, at most {} is read", where, key, rank, Shape::kMaxRank);
  std::vector<hsize_t> dims(static_cast<size_t>(rank));
  H5Sget_simple_extent_dims(space, dims.data(), nullptr);
  Shape shape;
  uint64_t count = 1;  // the elements, counted without overflow (a crafted file may declare any dims)
  for (hsize_t d : dims) {
    if (d > (uint64_t{1} << 40) || __builtin_mul_overflow(count, static_cast<uint64_t>(d), &count) ||
        count > (uint64_t{1} << 40))
      fail("{}: dataset \"{}\" declares more elements than a tensor holds; refused", where, key);
    shape.push_back(static_cast<int64_t>(d));
  }
  Id type(H5Dget_type(set), H5Tclose);
  H5T_class_t kind = H5Tget_class(type);
  if (kind != H5T_FLOAT && kind != H5T_INTEGER)
    fail("{}: dataset \"{}\" is neither floating-point nor integer (HDF5 type class {})", where, key,
         static_cast<int>(kind));
  // A dataset must hold the bytes it declares (no shape bombs): compressed data at most 1000 times.
  double declared = static_cast<double>(count) * static_cast<double>(H5Tget_size(type));
  if (declared > (1 << 20) && declared > 1000.0 * static_cast<double>(H5Dget_storage_size(set)))
    fail("{}: dataset \"{}\" declares shape {} but stores {} bytes; refused", where, key, shape.str(),
         H5Dget_storage_size(set));
  Tensor t = Tensor::empty(shape, kind == H5T_FLOAT ? DType::Float32 : DType::Int32);
  if (t.numel() > 0)
    check(H5Dread(set, kind == H5T_FLOAT ? H5T_NATIVE_FLOAT : H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, t.raw()),
          "read a dataset", where);
  return t;
}

struct Visit {
  std::vector<std::string> vars;  // paths of the groups named "vars"
  std::string bad_link;
};

herr_t visit_link(hid_t root, const char* name, const H5L_info_t* info, void* data) {
  auto* v = static_cast<Visit*>(data);
  if (info->type != H5L_TYPE_HARD) {
    v->bad_link = name;
    return 1;  // stop
  }
  std::string path(name);
  size_t slash = path.find_last_of('/');
  if (path.substr(slash == std::string::npos ? 0 : slash + 1) != "vars") return 0;
  H5O_info_t object;
  if (H5Oget_info_by_name(root, name, &object, H5P_DEFAULT) >= 0 && object.type == H5O_TYPE_GROUP)
    v->vars.push_back(path);
  return 0;
}

herr_t list_link(hid_t, const char* name, const H5L_info_t*, void* data) {
  static_cast<std::vector<std::string>*>(data)->emplace_back(name);
  return 0;
}

}  // namespace

bool is_hdf5(std::string_view bytes) { return bytes.substr(0, 8) == std::string_view("\x89HDF\r\n\x1a\n", 8); }

std::string encode_keras_weights(const std::vector<KerasVars>& groups) {
  std::lock_guard lock(h5_mutex());
  quiet();
  const std::string where = "Keras weights file";
  Id fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  check(H5Pset_fapl_core(fapl, 1 << 20, 0), "set up an in-memory file", where);
  Id file(H5Fcreate("tandem.weights.h5", H5F_ACC_TRUNC, H5P_DEFAULT, fapl), H5Fclose);
  if (!file.ok()) fail("{}: HDF5 cannot create an in-memory file", where);
  Id lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(lcpl, 1);
  for (const KerasVars& g : groups) {
    std::string path = g.path.empty() ? "vars" : g.path + "/vars";
    Id group(H5Gcreate2(file, path.c_str(), lcpl, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
    if (!group.ok()) fail("{}: HDF5 cannot create group \"{}\" (twice?)", where, path);
    if (!g.name.empty()) write_name(group, g.name);
    for (size_t i = 0; i < g.values.size(); ++i) write_dataset(group, std::to_string(i), g.values[i], path);
  }
  check(H5Fflush(file, H5F_SCOPE_GLOBAL), "flush", where);
  ssize_t size = H5Fget_file_image(file, nullptr, 0);
  if (size <= 0) fail("{}: HDF5 gave no file image", where);
  std::string out(static_cast<size_t>(size), '\0');
  if (H5Fget_file_image(file, out.data(), out.size()) != size) fail("{}: HDF5 gave a short file image", where);
  return out;
}

std::vector<KerasVars> decode_keras_weights(std::string_view bytes, const std::string& source) {
  if (!is_hdf5(bytes))
    fail("\"{}\" is not an HDF5 file ({} bytes, without HDF5's signature): expected Keras 3's weights", source,
         bytes.size());
  std::lock_guard lock(h5_mutex());
  quiet();
  Id fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  check(H5Pset_fapl_core(fapl, 1 << 20, 0), "set up an in-memory file", source);
  check(H5Pset_file_image(fapl, const_cast<char*>(bytes.data()), bytes.size()), "take the file's bytes", source);
  Id file(H5Fopen("tandem-read.weights.h5", H5F_ACC_RDONLY, fapl), H5Fclose);
  if (!file.ok()) fail("\"{}\": HDF5 cannot open it ({} bytes; truncated or damaged?)", source, bytes.size());
  Visit visit;
  if (H5Lvisit(file, H5_INDEX_NAME, H5_ITER_INC, visit_link, &visit) < 0)
    fail("\"{}\": HDF5 cannot walk its groups (damaged?)", source);
  if (!visit.bad_link.empty())
    fail("\"{}\": \"{}\" is a soft or external link; Keras' weights hold none, so the file is refused", source,
         visit.bad_link);
  std::vector<KerasVars> out;
  for (const std::string& path : visit.vars) {
    std::string where = fmt::format("\"{}\", group \"{}\"", source, path);
    Id group(H5Gopen2(file, path.c_str(), H5P_DEFAULT), H5Gclose);
    if (!group.ok()) fail("{}: HDF5 cannot open it", where);
    std::vector<std::string> keys;
    if (H5Literate(group, H5_INDEX_NAME, H5_ITER_INC, nullptr, list_link, &keys) < 0)
      fail("{}: HDF5 cannot list it", where);
    std::vector<std::pair<size_t, std::string>> indexed;
    for (const std::string& k : keys) {
      if (k.empty() || k.size() > 9 || !std::all_of(k.begin(), k.end(), [](char c) { return c >= '0' && c <= '9'; }))
        fail("{}: holds \"{}\"; Keras names its datasets \"0\", \"1\", ...", where, k);
      indexed.emplace_back(std::stoul(k), k);
    }
    std::sort(indexed.begin(), indexed.end());
    KerasVars g{path.size() > 4 ? path.substr(0, path.size() - 5) : "", read_name(group), {}};
    for (size_t i = 0; i < indexed.size(); ++i) {
      if (indexed[i].first != i) fail("{}: datasets {} without \"{}\"", where, indexed.size(), i);
      g.values.push_back(read_dataset(group, indexed[i].second, where));
    }
    out.push_back(std::move(g));
  }
  std::sort(out.begin(), out.end(), [](const KerasVars& a, const KerasVars& b) { return a.path < b.path; });
  return out;
}

}  // namespace tandem::io
