// ONNX's protobuf messages, encoded field by field (see onnx_proto.h).
#include "export/onnx_proto.h"

#include <fmt/format.h>

#include <cstring>

#include "base/build_info.h"
#include "base/endian.h"
#include "base/error.h"

namespace dlrun::exporting {
namespace {

// onnx.proto's field numbers, for the fields written here.
namespace model { constexpr int kIrVersion = 1, kProducerName = 2, kProducerVersion = 3, kGraph = 7, kOpset = 8,
                                kMetadata = 14; }
namespace opset { constexpr int kDomain = 1, kVersion = 2; }
namespace entry { constexpr int kKey = 1, kValue = 2; }
namespace graph { constexpr int kNode = 1, kName = 2, kInitializer = 5, kInput = 11, kOutput = 12; }
namespace node { constexpr int kInput = 1, kOutput = 2, kName = 3, kOpType = 4, kAttribute = 5; }
namespace attr { constexpr int kName = 1, kF = 2, kI = 3, kInts = 8, kType = 20;
                 constexpr int kFloat = 1, kInt = 2, kIntList = 7; }  // AttributeType
namespace tensor { constexpr int kDims = 1, kDataType = 2, kName = 8, kRawData = 9, kExternalData = 13,
                   kDataLocation = 14; constexpr int kFloat = 1, kInt64 = 7, kExternal = 1; }
namespace value { constexpr int kName = 1, kType = 2; }
namespace type { constexpr int kTensorType = 1, kElemType = 1, kShape = 2; }
namespace shape { constexpr int kDim = 1, kDimValue = 1, kDimParam = 2; }

}  // namespace

std::string OnnxGraph::weight(const std::string& name, const torch::Tensor& t) {
  DLRUN_CHECK(t.is_floating_point(), ExitCode::kRuntime, "ONNX export: weight {} is not floating point", name);
  DLRUN_CHECK(host_is_little_endian(), ExitCode::kRuntime,
              "ONNX export needs a little-endian host (raw_data is little-endian)");
  DLRUN_CHECK(weight_names_.insert(name).second, ExitCode::kRuntime, "ONNX export: two weights named {}", name);
  const torch::Tensor c = t.detach().to(torch::kCPU, torch::kFloat32).contiguous();
  const size_t n = static_cast<size_t>(c.numel()) * 4;
  weights_.push_back({name, c.sizes().vec(), tensor::kFloat, std::string(static_cast<const char*>(c.data_ptr()), n)});
  weight_bytes_ += n;
  return name;
}

std::string OnnxGraph::node(const std::string& op, const std::vector<std::string>& inputs,
                            const std::vector<OnnxAttr>& attrs) {
  Node n{op, fmt::format("{}_{}", op, counter_++), inputs, attrs};
  nodes_.push_back(n);
  return n.output;
}

std::string OnnxGraph::ints(const std::string& name, const std::vector<int64_t>& values, bool scalar) {
  DLRUN_CHECK(weight_names_.insert(name).second, ExitCode::kRuntime, "ONNX export: two constants named {}", name);
  DLRUN_CHECK(!scalar || values.size() == 1, ExitCode::kRuntime, "ONNX export: a scalar of {} values", values.size());
  std::string raw(values.size() * 8, '\0');
  for (size_t i = 0; i < values.size(); ++i)
    for (int b = 0; b < 8; ++b) raw[i * 8 + b] = static_cast<char>((static_cast<uint64_t>(values[i]) >> (8 * b)) & 0xff);
  std::vector<int64_t> dims;
  if (!scalar) dims.push_back(static_cast<int64_t>(values.size()));
  weight_bytes_ += raw.size();
  weights_.push_back({name, dims, tensor::kInt64, std::move(raw)});
  return name;
}

void OnnxGraph::name_output(const std::string& value, const std::string& name) {
  bool found = false;
  for (Node& n : nodes_) {
    if (n.output == value) {
      n.output = name;
      found = true;
    }
    for (std::string& in : n.inputs)
      if (in == value) in = name;
  }
  DLRUN_CHECK(found, ExitCode::kRuntime, "ONNX export: no node gives {}", value);
}

proto::Writer OnnxGraph::value_info(const std::string& name, const std::vector<int64_t>& dims,
                                  const std::string& dynamic) {
  proto::Writer s;
  for (int64_t d : dims) {
    proto::Writer dim;
    if (d < 0) dim.bytes(shape::kDimParam, dynamic);
    else dim.varint(shape::kDimValue, static_cast<uint64_t>(d));
    s.message(shape::kDim, dim);
  }
  proto::Writer tensor_type;
  tensor_type.varint(type::kElemType, tensor::kFloat);
  tensor_type.message(type::kShape, s);
  proto::Writer t;
  t.message(type::kTensorType, tensor_type);
  proto::Writer v;
  v.bytes(value::kName, name);
  v.message(value::kType, t);
  return v;
}

void OnnxGraph::input(const std::string& name, const std::vector<int64_t>& dims, const std::string& dynamic) {
  inputs_.push_back(value_info(name, dims, dynamic));
}

void OnnxGraph::output(const std::string& name, const std::vector<int64_t>& dims, const std::string& dynamic) {
  outputs_.push_back(value_info(name, dims, dynamic));
}

std::string OnnxGraph::model_bytes(const std::string& graph_name, int64_t opset_version, int64_t ir_version,
                                   const std::map<std::string, std::string>& metadata, const std::string& external,
                                   std::string* data) const {
  DLRUN_CHECK(external.empty() == (data == nullptr), ExitCode::kRuntime, "ONNX export: external data without a file");
  proto::Writer g;
  for (size_t k = 0; k < nodes_.size(); ++k) {
    const Node& n = nodes_[k];
    proto::Writer p;
    for (const auto& in : n.inputs) p.bytes(node::kInput, in);
    p.bytes(node::kOutput, n.output);
    p.bytes(node::kName, fmt::format("{}_{}", n.op, k));
    p.bytes(node::kOpType, n.op);
    for (const OnnxAttr& a : n.attrs) {
      proto::Writer w;
      w.bytes(attr::kName, a.name);
      if (const auto* i = std::get_if<int64_t>(&a.value)) {
        w.varint(attr::kI, static_cast<uint64_t>(*i));
        w.varint(attr::kType, attr::kInt);
      } else if (const auto* f = std::get_if<float>(&a.value)) {
        w.fixed32_float(attr::kF, *f);
        w.varint(attr::kType, attr::kFloat);
      } else {
        for (int64_t v : std::get<std::vector<int64_t>>(a.value)) w.varint(attr::kInts, static_cast<uint64_t>(v));
        w.varint(attr::kType, attr::kIntList);
      }
      p.message(node::kAttribute, w);
    }
    g.message(graph::kNode, p);
  }
  g.bytes(graph::kName, graph_name);
  for (const Initializer& t : weights_) {
    proto::Writer w;
    for (int64_t d : t.dims) w.varint(tensor::kDims, static_cast<uint64_t>(d));
    w.varint(tensor::kDataType, static_cast<uint64_t>(t.data_type));
    w.bytes(tensor::kName, t.name);
    if (data != nullptr && t.raw.size() >= kExternalMin) {
      for (const auto& [key, value] : {std::pair<std::string, std::string>{"location", external},
                                       {"offset", std::to_string(data->size())},
                                       {"length", std::to_string(t.raw.size())}}) {
        proto::Writer e;
        e.bytes(entry::kKey, key);
        e.bytes(entry::kValue, value);
        w.message(tensor::kExternalData, e);
      }
      w.varint(tensor::kDataLocation, tensor::kExternal);
      data->append(t.raw);
    } else {
      w.bytes(tensor::kRawData, t.raw.data(), t.raw.size());
    }
    g.message(graph::kInitializer, w);
  }
  for (const auto& v : inputs_) g.message(graph::kInput, v);
  for (const auto& v : outputs_) g.message(graph::kOutput, v);

  proto::Writer m;
  m.varint(model::kIrVersion, static_cast<uint64_t>(ir_version));
  m.bytes(model::kProducerName, std::string("dlrun"));
  m.bytes(model::kProducerVersion, std::string(build::version()));
  m.message(model::kGraph, g);
  proto::Writer op;
  op.bytes(opset::kDomain, std::string());
  op.varint(opset::kVersion, static_cast<uint64_t>(opset_version));
  m.message(model::kOpset, op);
  for (const auto& [k, v] : metadata) {
    proto::Writer e;
    e.bytes(entry::kKey, k);
    e.bytes(entry::kValue, v);
    m.message(model::kMetadata, e);
  }
  return m.str();
}

}  // namespace dlrun::exporting
