// Dataset readers on small files written by the tests: idx (raw and gzip) with every error
// class, CIFAR-10/100 binaries, image_folder with JPEG/PNG files, and the real
// Fashion-MNIST when it is installed.
#include <png.h>
#include <turbojpeg.h>

#include <cstring>

#include "data/dataset.h"
#include "data/loader.h"
#include "data/data_files.h"
#include "support/errors.h"
#include "support/scratch_dir.h"

using namespace dlrun;
using namespace dlrun::testing::data;
using dlrun::testing::ScratchDir;
using dlrun::testing::require_error;

namespace {

std::vector<uint8_t> idx_images(uint32_t n, uint32_t h, uint32_t w, uint32_t magic = 0x803) {
  std::vector<uint8_t> b;
  be32(b, magic);
  be32(b, n);
  be32(b, h);
  be32(b, w);
  for (uint32_t i = 0; i < n * h * w; ++i) b.push_back(static_cast<uint8_t>(i % 251));
  return b;
}

std::vector<uint8_t> idx_labels(const std::vector<uint8_t>& labels, uint32_t magic = 0x801) {
  std::vector<uint8_t> b;
  be32(b, magic);
  be32(b, static_cast<uint32_t>(labels.size()));
  b.insert(b.end(), labels.begin(), labels.end());
  return b;
}

void write_idx_pair(const ScratchDir& d, const std::string& prefix, bool gz, uint32_t n = 5) {
  std::vector<uint8_t> labels;
  for (uint32_t i = 0; i < n; ++i) labels.push_back(static_cast<uint8_t>(i % 10));
  std::string ext = gz ? ".gz" : "";
  write_file(d / (prefix + "-images-idx3-ubyte" + ext), idx_images(n, 4, 3), gz);
  write_file(d / (prefix + "-labels-idx1-ubyte" + ext), idx_labels(labels), gz);
}

}  // namespace

TEST_CASE("idx files are read raw and gzipped", "[data]") {
  ScratchDir d;
  write_idx_pair(d, "train", /*gz=*/true, 5);
  write_idx_pair(d, "t10k", /*gz=*/false, 3);
  auto train = data::open(idx_opts(d), data::Split::kTrain, 0);
  auto eval = data::open(idx_opts(d), data::Split::kEval, 0);
  REQUIRE(train->size() == 5);
  REQUIRE(eval->size() == 3);
  auto [img, label] = train->get(2);
  CHECK(label == 2);
  REQUIRE(img.sizes() == torch::IntArrayRef({1, 4, 3}));
  CHECK(img[0][0][0].item<int>() == 24);  // pixel 2*12 of the running counter
  CHECK(train->info().mean.at(0) == Approx(0.1307));
  CHECK(train->info().num_classes == 10);
  CHECK(train->all().first.sizes() == torch::IntArrayRef({5, 1, 4, 3}));

  DataOptions limited = idx_opts(d);
  limited.limit_train = 2;
  CHECK(data::open(limited, data::Split::kTrain, 0)->size() == 2);
}

TEST_CASE("idx errors name the file", "[data]") {
  SECTION("missing file") {
    ScratchDir d;
    require_error([&] { data::open(idx_opts(d), data::Split::kTrain, 0); }, {"train-images-idx3-ubyte", "not found"});
  }
  SECTION("wrong magic") {
    ScratchDir d;
    write_idx_pair(d, "train", false);
    write_file(d / "train-images-idx3-ubyte", idx_images(5, 4, 3, 0x804));
    require_error([&] { data::open(idx_opts(d), data::Split::kTrain, 0); }, {"train-images-idx3-ubyte", "magic"});
  }
  SECTION("image and label counts disagree") {
    ScratchDir d;
    write_idx_pair(d, "train", true);
    write_file(d / "train-labels-idx1-ubyte.gz", idx_labels({0, 1, 2, 3}), true);
    require_error([&] { data::open(idx_opts(d), data::Split::kTrain, 0); },
                        {"count mismatch", "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"});
  }
  SECTION("truncated raw file") {
    ScratchDir d;
    write_idx_pair(d, "train", false);
    auto b = idx_images(5, 4, 3);
    b.resize(b.size() - 7);
    write_file(d / "train-images-idx3-ubyte", b);
    require_error([&] { data::open(idx_opts(d), data::Split::kTrain, 0); }, {"truncated", "train-images-idx3-ubyte"});
  }
  SECTION("truncated gzip stream") {
    ScratchDir d;
    write_idx_pair(d, "train", true, 50);
    auto gz = read_file(d / "train-images-idx3-ubyte.gz");
    gz.resize(gz.size() / 2);
    write_file(d / "train-images-idx3-ubyte.gz", gz);
    require_error([&] { data::open(idx_opts(d), data::Split::kTrain, 0); }, {"train-images-idx3-ubyte.gz"});
  }
  SECTION("label out of range") {
    ScratchDir d;
    write_idx_pair(d, "train", false);
    write_file(d / "train-labels-idx1-ubyte", idx_labels({0, 1, 12, 3, 4}));
    require_error([&] { data::open(idx_opts(d), data::Split::kTrain, 0); },
                        {"label out of range", "train-labels-idx1-ubyte", "12"});
  }
}

TEST_CASE("cifar binaries are read, truncation and bad labels are errors", "[data]") {
  ScratchDir d;
  auto record = [](std::vector<uint8_t>& b, std::vector<uint8_t> labels, uint8_t fill) {
    b.insert(b.end(), labels.begin(), labels.end());
    for (int p = 0; p < 3072; ++p) b.push_back(static_cast<uint8_t>(fill + p / 1024));  // one value per plane
  };
  fs::path dir10 = d / "cifar-10-batches-bin";
  for (int f = 1; f <= 5; ++f) {
    std::vector<uint8_t> b;
    record(b, {static_cast<uint8_t>(f)}, static_cast<uint8_t>(10 * f));
    record(b, {static_cast<uint8_t>(f + 1)}, static_cast<uint8_t>(10 * f + 5));
    write_file(dir10 / ("data_batch_" + std::to_string(f) + ".bin"), b);
  }
  std::vector<uint8_t> test;
  record(test, {9}, 0);
  write_file(dir10 / "test_batch.bin", test);
  DataOptions o;
  o.name = "cifar10";
  o.root = d.str();
  auto train = data::open(o, data::Split::kTrain, 0);
  REQUIRE(train->size() == 10);
  auto [img, label] = train->get(3);  // file 2, record 1
  CHECK(label == 3);
  CHECK(img.sizes() == torch::IntArrayRef({3, 32, 32}));
  CHECK(img[0][0][0].item<int>() == 25);
  CHECK(img[2][31][31].item<int>() == 27);
  CHECK(train->info().channels == 3);
  CHECK(data::open(o, data::Split::kEval, 0)->size() == 1);

  SECTION("truncated") {
    auto b = read_file(dir10 / "data_batch_4.bin");
    b.pop_back();
    write_file(dir10 / "data_batch_4.bin", b);
    require_error([&] { data::open(o, data::Split::kTrain, 0); }, {"data_batch_4.bin"});
  }
  SECTION("label out of range") {
    std::vector<uint8_t> bad;
    record(bad, {10}, 0);
    write_file(dir10 / "test_batch.bin", bad);
    require_error([&] { data::open(o, data::Split::kEval, 0); }, {"label out of range", "test_batch.bin"});
  }
  SECTION("cifar100 uses the fine label") {
    std::vector<uint8_t> b;
    record(b, {3, 77}, 1);
    write_file(d / "train.bin", b);
    DataOptions o100 = o;
    o100.name = "cifar100";
    auto ds = data::open(o100, data::Split::kTrain, 0);
    REQUIRE(ds->size() == 1);
    CHECK(ds->get(0).second == 77);
    CHECK(ds->info().num_classes == 100);
  }
}

namespace {

void write_jpeg(const fs::path& p, int w, int h, uint8_t r, uint8_t g, uint8_t b) {
  std::vector<uint8_t> rgb(static_cast<size_t>(w * h * 3));
  for (size_t i = 0; i < rgb.size(); i += 3) {
    rgb[i] = r;
    rgb[i + 1] = g;
    rgb[i + 2] = b;
  }
  tjhandle tj = tjInitCompress();
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  REQUIRE(tjCompress2(tj, rgb.data(), w, 0, h, TJPF_RGB, &buf, &size, TJSAMP_444, 95, 0) == 0);
  write_file(p, std::vector<uint8_t>(buf, buf + size));
  tjFree(buf);
  tjDestroy(tj);
}

void write_png(const fs::path& p, int w, int h, int channels, uint8_t value) {
  fs::create_directories(p.parent_path());
  std::vector<uint8_t> px(static_cast<size_t>(w * h * channels), value);
  png_image img;
  std::memset(&img, 0, sizeof(img));
  img.version = PNG_IMAGE_VERSION;
  img.width = static_cast<png_uint_32>(w);
  img.height = static_cast<png_uint_32>(h);
  img.format = channels == 3 ? PNG_FORMAT_RGB : PNG_FORMAT_GRAY;
  REQUIRE(png_image_write_to_file(&img, p.string().c_str(), 0, px.data(), 0, nullptr) != 0);
}

}  // namespace

TEST_CASE("image_folder decodes JPEG and PNG lazily and names undecodable files", "[data]") {
  ScratchDir d;
  write_jpeg(d / "train/cat/a.jpg", 16, 12, 200, 100, 50);
  write_png(d / "train/cat/b.png", 10, 10, 1, 90);  // gray -> replicated to RGB
  write_png(d / "train/dog/c.PNG", 20, 8, 3, 30);
  write_file(d / "train/dog/notes.txt", {'x'});
  write_png(d / "val/dog/d.png", 8, 8, 3, 60);
  DataOptions o;
  o.name = "image_folder";
  o.root = d.str();
  auto train = data::open(o, data::Split::kTrain, 0);
  REQUIRE(train->size() == 3);
  auto info = train->info();
  CHECK(info.channels == 3);
  CHECK(info.class_names == std::vector<std::string>{"cat", "dog"});
  CHECK_FALSE(train->all().first.defined());

  auto [jpg, l0] = train->get(0);
  CHECK(l0 == 0);
  REQUIRE(jpg.sizes() == torch::IntArrayRef({3, 12, 16}));
  CHECK(std::abs(jpg[0][5][5].item<int>() - 200) <= 3);
  CHECK(std::abs(jpg[2][5][5].item<int>() - 50) <= 3);
  auto [gray, l1] = train->get(1);
  CHECK(l1 == 0);
  CHECK(gray.sizes() == torch::IntArrayRef({3, 10, 10}));
  CHECK(gray.eq(90).all().item<bool>());
  CHECK(train->get(2).second == 1);
  CHECK(train->get(2).first.sizes() == torch::IntArrayRef({3, 8, 20}));

  auto eval = data::open(o, data::Split::kEval, 0);
  REQUIRE(eval->size() == 1);
  CHECK(eval->get(0).second == 1);

  SECTION("a loader resizes to data.image_size") {
    o.image_size = 6;
    o.batch_size = 3;
    o.workers = 2;
    o.augment = {"flip", "resized_crop"};
    data::Loader loader(train, o, data::LoaderSpec{});
    auto b = loader.next();
    REQUIRE(b);
    CHECK(b->x.sizes() == torch::IntArrayRef({3, 3, 6, 6}));
    CHECK_FALSE(loader.next());
  }
  SECTION("image_size 0 is an error for varying sizes") {
    require_error([&] { data::Loader l(train, o, data::LoaderSpec{}); }, {"image_size"});
  }
  SECTION("an undecodable image fails in get() naming the file") {
    write_file(d / "val/dog/e.jpg", {0xFF, 0xD8, 0xFF, 0xE0, 1, 2, 3});
    write_file(d / "val/dog/f.png", {'n', 'o', 't', ' ', 'p', 'n', 'g'});
    auto bad = data::open(o, data::Split::kEval, 0);
    REQUIRE(bad->size() == 3);
    require_error([&] { bad->get(1); }, {"e.jpg", "undecodable"});
    require_error([&] { bad->get(2); }, {"f.png", "undecodable"});
  }
  SECTION("no class folders") {
    ScratchDir empty;
    fs::create_directories(empty / "train");
    fs::create_directories(empty / "val");
    o.root = empty.str();
    require_error([&] { data::open(o, data::Split::kTrain, 0); }, {"no class folders", "train"});
  }
}

TEST_CASE("unknown dataset names list the valid ones", "[data]") {
  DataOptions o;
  o.name = "imagenet21k";
  try {
    data::open(o, data::Split::kTrain, 0);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.code() == ExitCode::kBadInput);
    CHECK(e.hint().find("fashion_mnist") != std::string::npos);
  }
}

TEST_CASE("real Fashion-MNIST opens with 60000/10000 samples", "[data]") {
  const std::string root = "/usr/share/datasets/fashion-mnist";
  if (!fs::is_directory(root)) {
    WARN("skipped: " << root << " is missing (install dataset-fashion-mnist)");
    return;
  }
  DataOptions o;
  o.name = "fashion_mnist";  // root left empty: the default directory
  auto train = data::open(o, data::Split::kTrain, 0);
  auto eval = data::open(o, data::Split::kEval, 0);
  CHECK(train->size() == 60000);
  CHECK(eval->size() == 10000);
  for (const auto& ds : {train, eval}) {
    auto [images, labels] = ds->all();
    CHECK(images.sizes() == torch::IntArrayRef({ds->size(), 1, 28, 28}));
    CHECK(labels.min().item<int64_t>() == 0);
    CHECK(labels.max().item<int64_t>() == 9);
  }
  CHECK(train->info().mean.at(0) == Approx(0.2860));
  CHECK(train->info().std.at(0) == Approx(0.3530));
}
