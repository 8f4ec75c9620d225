// parallel/mesh.cpp — DeviceMesh (see mesh.h).
#include "multigrad/parallel/mesh.h"

#include <algorithm>
#include <charconv>

#include "multigrad/core/error.h"

namespace mg::parallel {

DeviceMesh::DeviceMesh(Communicator& comm, MeshDims dims) : dims_(std::move(dims)) {
  MG_CHECK(!dims_.empty(), "DeviceMesh: no dimensions");
  int64_t ranks = 1;
  for (size_t d = 0; d < dims_.size(); ++d) {
    const auto& [name, size] = dims_[d];
    MG_CHECK(!name.empty() && size >= 1, "DeviceMesh: dimension ", d, " is '", name, "' of size ", size,
             " (expected a name and a size of at least 1)");
    for (size_t e = 0; e < d; ++e)
      MG_CHECK(dims_[e].first != name, "DeviceMesh: dimension '", name, "' is listed twice");
    ranks *= size;
  }
  MG_CHECK(ranks == comm.size(), "DeviceMesh: the mesh ", str(), " has ", ranks, " ranks, but the communicator has ",
           comm.size());
  // Row-major coordinates, the last dimension fastest.
  coordinates_.resize(dims_.size());
  for (size_t d = dims_.size(), rest = size_t(comm.rank()); d-- > 0;) {
    coordinates_[d] = int(rest % size_t(dims_[d].second));
    rest /= size_t(dims_[d].second);
  }
  // Along d: the ranks with this rank's other coordinates, the color their row-major index with
  // d left out.
  for (size_t d = 0; d < dims_.size(); ++d) {
    int color = 0;
    for (size_t e = 0; e < dims_.size(); ++e)
      if (e != d) color = color * dims_[e].second + coordinates_[e];
    comms_.push_back(comm.split(color, coordinates_[d]));
  }
}

size_t DeviceMesh::index_of(const std::string& dim) const {
  for (size_t d = 0; d < dims_.size(); ++d)
    if (dims_[d].first == dim) return d;
  MG_ERROR("DeviceMesh: no dimension '", dim, "' in the mesh ", str());
}

int DeviceMesh::size(const std::string& dim) const { return dims_[index_of(dim)].second; }
int DeviceMesh::coordinate(const std::string& dim) const { return coordinates_[index_of(dim)]; }
Communicator& DeviceMesh::comm(const std::string& dim) const { return *comms_[index_of(dim)]; }

std::string DeviceMesh::str() const {
  std::string out;
  for (const auto& [name, size] : dims_) out += (out.empty() ? "" : ", ") + name + "=" + std::to_string(size);
  return out;
}

MeshDims parse_mesh(const std::string& text) {
  MeshDims dims;
  size_t begin = 0;
  while (begin <= text.size()) {
    const size_t end = std::min(text.find(',', begin), text.size());
    const std::string part = text.substr(begin, end - begin);
    const size_t eq = part.find('=');
    int size = 0;
    bool ok = eq != std::string::npos && eq > 0;
    if (ok) {
      const auto [stop, ec] = std::from_chars(part.data() + eq + 1, part.data() + part.size(), size);
      ok = ec == std::errc() && stop == part.data() + part.size() && size >= 1;
    }
    MG_CHECK(ok, "mesh '", text, "': '", part, "' is not name=size with a size of at least 1 (e.g. dp=2,tp=2)");
    dims.emplace_back(part.substr(0, eq), size);
    begin = end + 1;
  }
  return dims;
}

}  // namespace mg::parallel
