// parallel/mesh.h — DeviceMesh: the ranks of a communicator as a grid with named dimensions
// (dp=2, tp=2; dp, pp, tp), with a sub-communicator along each dimension (Communicator::split),
// so that parallel modes can compose: data parallelism across one dimension, tensor or pipeline
// parallelism across another (docs/design.md).
//
// Layout: row-major over the dimensions as listed, the last varying fastest, as PyTorch's
// init_device_mesh: with dp=2, tp=2 the ranks are [[0, 1], [2, 3]], so ranks 0 and 1 are the tp
// group of dp coordinate 0, and ranks 0 and 2 the dp group of tp coordinate 0. comm(d) holds the
// ranks whose coordinates differ from this rank's only along d, ranked by their coordinate there.
//
// Construction is collective (one split per dimension, in order): every rank builds the same
// mesh. Errors name the mesh and the communicator's size. Lifetimes: comm must outlive the mesh.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "multigrad/parallel/comm/communicator.h"

namespace mg::parallel {

using MeshDims = std::vector<std::pair<std::string, int>>;  // (name, size), outermost first

class DeviceMesh {
 public:
  // The sizes must multiply to comm.size(); names must be unique and non-empty.
  DeviceMesh(Communicator& comm, MeshDims dims);

  const MeshDims& dims() const { return dims_; }
  int size(const std::string& dim) const;
  // This rank's index along dim.
  int coordinate(const std::string& dim) const;
  // The ranks that differ from this one only along dim (its rank there is coordinate(dim)).
  Communicator& comm(const std::string& dim) const;
  // "dp=2, tp=2"
  std::string str() const;

 private:
  size_t index_of(const std::string& dim) const;

  MeshDims dims_;
  std::vector<int> coordinates_;
  std::vector<std::unique_ptr<Communicator>> comms_;  // per dimension
};

// "dp=2,tp=2" -> {{"dp", 2}, {"tp", 2}}; an error names the text and the part that is wrong.
MeshDims parse_mesh(const std::string& text);

}  // namespace mg::parallel
