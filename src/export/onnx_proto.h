// The ONNX model format written without a protobuf library (docs/design.md, "Writing ONNX"):
// LibTorch bundles its own protobuf, and a second one linked into dlrun (Debian's, for code
// generated from onnx.proto) would clash with it symbol for symbol. dlrun writes few messages
// and only writes them, so they are encoded with base/protobuf.h's writer (the wire format, as
// TensorBoard's events are) and the field numbers of onnx.proto (ONNX 1.x).
//
// OnnxGraph collects a graph's nodes, weights, input and output; model_bytes() is the
// serialized ModelProto. The export's tests read the bytes back with the `onnx` package
// (onnx.checker) and run them with onnxruntime.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "base/protobuf.h"

namespace dlrun::exporting {

/// A node attribute: an int, a float or a list of ints.
struct OnnxAttr {
  std::string name;
  std::variant<int64_t, float, std::vector<int64_t>> value;
};

class OnnxGraph {
 public:
  /// A weight (float tensors are written as float32); returns its name. A name is given once.
  std::string weight(const std::string& name, const torch::Tensor& t);
  /// An int64 constant (a shape, the starts of a slice, an index): a vector, or a scalar.
  std::string ints(const std::string& name, const std::vector<int64_t>& values, bool scalar = false);
  /// A node of the default ONNX domain with one output; returns the output's name.
  std::string node(const std::string& op, const std::vector<std::string>& inputs,
                   const std::vector<OnnxAttr>& attrs = {});
  /// The graph's float input or output: -1 in `dims` is the dynamic axis called `dynamic`.
  void input(const std::string& name, const std::vector<int64_t>& dims, const std::string& dynamic);
  void output(const std::string& name, const std::vector<int64_t>& dims, const std::string& dynamic);
  /// Renames the value `value`, a node's output, `name` (the graph's output must carry the
  /// output's name); the nodes that read it read it under the new name.
  void name_output(const std::string& value, const std::string& name);
  /// The ModelProto: this graph, the opset, dlrun as producer and `metadata` as metadata_props.
  /// With `external` (a file name, relative to the model's folder) and `data`, ONNX's external
  /// data: every initializer of kExternalMin bytes or more goes into `*data`, which is to be
  /// written as that file, and the model refers to its offset and length there.
  std::string model_bytes(const std::string& graph_name, int64_t opset, int64_t ir_version,
                          const std::map<std::string, std::string>& metadata, const std::string& external = "",
                          std::string* data = nullptr) const;
  size_t nodes() const { return nodes_.size(); }
  size_t initializers() const { return weights_.size(); }
  /// The bytes of all initializers.
  size_t weight_bytes() const { return weight_bytes_; }
  /// Initializers smaller than this stay in the model file with external data (torch.onnx's 1 KiB).
  static constexpr size_t kExternalMin = 1024;

 private:
  struct Node {
    std::string op, output;
    std::vector<std::string> inputs;
    std::vector<OnnxAttr> attrs;
  };
  static proto::Writer value_info(const std::string& name, const std::vector<int64_t>& dims,
                                const std::string& dynamic);
  struct Initializer {
    std::string name;
    std::vector<int64_t> dims;
    int data_type;
    std::string raw;  ///< little-endian
  };
  std::vector<Node> nodes_;
  std::vector<Initializer> weights_;
  std::set<std::string> weight_names_;
  size_t weight_bytes_ = 0;
  std::vector<proto::Writer> inputs_, outputs_;
  int counter_ = 0;
};

}  // namespace dlrun::exporting
