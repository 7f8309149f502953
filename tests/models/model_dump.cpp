// Test helper: builds a model and writes its weights and the logits of a fixed input in files
// Python's torch.load reads (torch::pickle_save of a dict), for torchvision_compat.py.
//
//   dlrun_model_dump NAME NUM_CLASSES IN_CHANNELS STEM SEED SIZE OUT_PREFIX
// writes OUT_PREFIX.state.pt ({state-dict key: tensor}, in state-dict order) and
// OUT_PREFIX.io.pt ({"input": (2, C, SIZE, SIZE), "logits": (2, NUM_CLASSES)}, eval mode).
//
//   dlrun_model_dump --load NAME WEIGHTS INPUT OUT [ONNX [fold]]
// the other way: builds NAME for the input's shape and class count of WEIGHTS' last entry (the
// head's bias), loads WEIGHTS (a file torch.save wrote: torchvision's state dict) strictly as
// model.init and `dlrun eval --checkpoint` read it, and writes OUT ({"logits": ...}, eval mode)
// for INPUT's "input" tensor (torch.save of {"input": (N, C, H, W)}); with ONNX, also the model
// as `dlrun export --format onnx` writes it, and with `fold` a second file ONNX.folded with its
// BatchNorms folded (`--fold-batchnorm`), for onnx_zoo.py.
#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <fstream>
#include <iostream>
#include <string>

#include "checkpoint/weights_file.h"
#include "export/format.h"
#include "models/model.h"
#include "models/weights.h"

namespace {

void write_dict(const c10::Dict<std::string, at::Tensor>& dict, const std::string& path) {
  std::vector<char> bytes = torch::pickle_save(dict);
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error(path + ": cannot write");
}

// --load: torchvision's weights into dlrun's model, and its logits.
int load_and_run(const std::string& name, const std::string& weights, const std::string& input_file,
                 const std::string& out, const std::string& onnx, bool fold) {
  const dlrun::ckpt::WeightsRead w = dlrun::ckpt::read_weights(weights);
  const dlrun::ckpt::WeightsRead in = dlrun::ckpt::read_weights(input_file);
  const torch::Tensor input = in.tensors.at(0).second;  // (N, C, H, W)
  dlrun::ModelOptions opts;
  opts.name = name;
  opts.num_classes = w.tensors.back().second.size(0);  // the head's bias comes last
  opts.in_channels = input.size(1);
  opts.image_size = input.size(2);  // the transformers are built for the input's side
  auto model = dlrun::models::build(opts, /*seed=*/0, input.size(2), input.size(3));
  dlrun::models::LoadOptions o;
  o.strict = true;
  o.in_channels = opts.in_channels;
  const auto report = dlrun::models::load_weights(*model, w.tensors, w.path, o);
  model->eval();
  torch::NoGradGuard no_grad;
  c10::Dict<std::string, at::Tensor> io;
  io.insert("logits", model->forward(input.to(model->dtype())));
  write_dict(io, out);
  if (!onnx.empty()) {
    for (const bool folded : {false, true}) {
      if (folded && !fold) break;
      const std::string path = folded ? onnx + ".folded" : onnx;
      const std::string bytes = dlrun::exporting::onnx_files(*model, opts, input.size(2), folded, {}).model;
      std::ofstream f(path, std::ios::binary);
      f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
      if (!f) throw std::runtime_error(path + ": cannot write");
    }
  }
  std::cout << name << ": " << report.summary() << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 6 && argc <= 8 && std::string(argv[1]) == "--load") {
    try {
      torch::set_num_threads(1);
      return load_and_run(argv[2], argv[3], argv[4], argv[5], argc >= 7 ? argv[6] : "",
                          argc == 8 && std::string(argv[7]) == "fold");
    } catch (const std::exception& e) {
      std::cerr << "dlrun_model_dump: " << e.what() << "\n";
      return 1;
    }
  }
  if (argc != 8) {
    std::cerr << "usage: dlrun_model_dump NAME NUM_CLASSES IN_CHANNELS STEM SEED SIZE OUT_PREFIX\n";
    return 2;
  }
  try {
    torch::set_num_threads(1);  // a tiny forward: one thread is fastest and immune to load
    dlrun::ModelOptions opts;
    opts.name = argv[1];
    opts.num_classes = std::stoll(argv[2]);
    opts.in_channels = std::stoll(argv[3]);
    opts.stem = std::string(argv[4]) == "cifar" ? dlrun::ResnetStem::kCifar : dlrun::ResnetStem::kImagenet;
    const uint64_t seed = std::stoull(argv[5]);
    const int64_t size = std::stoll(argv[6]);
    const std::string prefix = argv[7];

    auto model = dlrun::models::build(opts, seed, size);
    c10::Dict<std::string, at::Tensor> state;
    for (const auto& [name, t] : dlrun::models::state_dict(*model)) state.insert(name, t.detach().contiguous());
    write_dict(state, prefix + ".state.pt");

    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed + 1);
    torch::Tensor input = torch::randn({2, opts.in_channels, size, size}, gen);  // (2, C, S, S)
    model->eval();
    torch::NoGradGuard no_grad;
    c10::Dict<std::string, at::Tensor> io;
    io.insert("input", input);
    io.insert("logits", model->forward(input));
    write_dict(io, prefix + ".io.pt");
  } catch (const std::exception& e) {
    std::cerr << "dlrun_model_dump: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
