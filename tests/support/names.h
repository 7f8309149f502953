// The names dlrun's registries give the config (config/choices.h): model.name, data.name and
// data.augment. The torch-free test binary links no registry, so its config tests register
// these copies (tests/config/choices_test.cpp); the core tests check that they still equal the
// registries' own lists (tests/train/registries_test.cpp), so the copies cannot drift.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace dlrun::testing {

/// key -> the names in the registry's order.
inline const std::map<std::string, std::vector<std::string>>& registry_names() {
  static const std::map<std::string, std::vector<std::string>> names = {
      {"model.name",
       {"mlp", "convnet", "resnet18", "resnet34", "resnet50", "resnet101", "resnet152", "resnext50_32x4d",
        "resnext101_32x8d", "resnext101_64x4d", "wide_resnet50_2", "wide_resnet101_2", "mobilenet_v2",
        "mobilenet_v3_large", "mobilenet_v3_small", "efficientnet_b0", "efficientnet_b1", "efficientnet_b2",
        "efficientnet_b3", "efficientnet_b4", "efficientnet_b5", "efficientnet_b6", "efficientnet_b7", "efficientnet_v2_s",
        "efficientnet_v2_m", "efficientnet_v2_l", "regnet_y_400mf",
        "regnet_y_800mf", "regnet_y_1_6gf", "regnet_y_3_2gf", "regnet_y_8gf", "regnet_y_16gf", "regnet_y_32gf",
        "regnet_y_128gf", "regnet_x_400mf", "regnet_x_800mf", "regnet_x_1_6gf", "regnet_x_3_2gf", "regnet_x_8gf",
        "regnet_x_16gf", "regnet_x_32gf", "convnext_tiny", "convnext_small", "convnext_base", "convnext_large",
        "vit_b_16", "vit_b_32", "vit_l_16", "vit_l_32", "vit_h_14", "swin_t", "swin_s", "swin_b",
        "swin_v2_t", "swin_v2_s", "swin_v2_b"}},
      {"data.name", {"cifar10", "cifar100", "fashion_mnist", "image_folder", "mnist", "synthetic", "webdataset"}},
      {"data.augment",
       {"flip", "vflip", "crop", "resized_crop", "rotate", "translate", "erase", "trivial_augment", "rand_augment",
        "auto_augment", "augmix", "color_jitter"}},
  };
  return names;
}

/// The names of `key` joined by `sep` ("mlp, convnet, ..."), as messages and docs list them.
inline std::string joined_names(const std::string& key, const std::string& sep) {
  std::string out;
  for (const auto& n : registry_names().at(key)) out += (out.empty() ? "" : sep) + n;
  return out;
}

}  // namespace dlrun::testing
