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
  /// A weight (float tensors are written as float32); returns its name.
  std::string weight(const std::string& name, const torch::Tensor& t);
  /// A node of the default ONNX domain with one output; returns the output's name.
  std::string node(const std::string& op, const std::vector<std::string>& inputs,
                   const std::vector<OnnxAttr>& attrs = {});
  /// The graph's float input or output: -1 in `dims` is the dynamic axis called `dynamic`.
  void input(const std::string& name, const std::vector<int64_t>& dims, const std::string& dynamic);
  void output(const std::string& name, const std::vector<int64_t>& dims, const std::string& dynamic);
  /// Renames the last node's output (the graph's output must carry the output's name).
  void rename_last_output(const std::string& name);
  /// The ModelProto: this graph, the opset, dlrun as producer and `metadata` as metadata_props.
  std::string model_bytes(const std::string& graph_name, int64_t opset, int64_t ir_version,
                          const std::map<std::string, std::string>& metadata) const;
  size_t nodes() const { return nodes_.size(); }
  size_t initializers() const { return weights_.size(); }

 private:
  struct Node {
    std::string op, output;
    std::vector<std::string> inputs;
    std::vector<OnnxAttr> attrs;
  };
  static proto::Writer value_info(const std::string& name, const std::vector<int64_t>& dims,
                                const std::string& dynamic);
  std::vector<Node> nodes_;
  std::vector<proto::Writer> weights_;
  std::vector<proto::Writer> inputs_, outputs_;
  int counter_ = 0;
};

}  // namespace dlrun::exporting
