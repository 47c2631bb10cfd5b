// TokenDataset and TokenLoader under mpirun: the union of the ranks' windows at each step is the
// one-rank global batch (memory and stream strategies), every rank's node copy holds all tokens
// (also across simulated nodes), and a bad token that only one rank reads gives every rank the
// same one-line DataError. Rank 0 writes the inputs.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstring>
#include <filesystem>

#include "data/dataset_open.hpp"
#include "ringtrain/data/token_loader.hpp"
#include "ringtrain/data/tokens.hpp"
#include "support/root_checks.hpp"
#include "support/test_context.hpp"
#include "unit/data/token_files.hpp"

namespace ringtrain {
namespace {

namespace fs = std::filesystem;
using test::on_root;
using test::same_on_all_ranks;
using test::token_of;
using test::tokens_from;

constexpr std::int64_t kVocab = 300;

int rank() { return test::context().world_rank(); }
int world() { return test::context().world_size(); }

TokenDatasetSpec spec_of(const std::vector<std::string>& sources, std::int64_t block_size, ReadStrategy strategy) {
  TokenDatasetSpec spec;
  spec.sources = sources;
  spec.block_size = block_size;
  spec.strategy = strategy;
  spec.read_block_bytes = 128;
  return spec;
}

class TokenDatasetMpi : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::temp_dir(std::string("token-mpi-") + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    files_ = {path("a.h5"), path("b.h5")};
    ASSERT_TRUE(on_root([&] {
      test::write_token_file(files_[0], tokens_from(0, 1500, kVocab));
      test::write_token_file(files_[1], tokens_from(1500, 1100, kVocab), {.chunk = 0});
    }));
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
  std::vector<std::string> files_;
};

TEST_F(TokenDatasetMpi, RanksTogetherHoldTheOneRankGlobalBatch) {
  constexpr std::int64_t kGlobal = 24;  // a multiple of 2 and 4
  constexpr std::int64_t kBlock = 16;
  for (const ReadStrategy st : {ReadStrategy::memory, ReadStrategy::stream}) {
    SCOPED_TRACE(read_strategy_name(st));
    const auto ds = TokenDataset::open(test::context(), spec_of(files_, kBlock, st));
    ASSERT_EQ(ds->size(), 2600);
    TokenLoaderOptions one;
    one.batch_size = kGlobal;
    one.seed = 17;
    one.epochs = 2;
    TokenLoaderOptions mine = one;
    mine.batch_size = kGlobal / world();
    mine.world_size = world();
    mine.rank = rank();
    TokenLoader reference(ds, one);
    TokenLoader loader(ds, mine);
    ASSERT_EQ(loader.steps_per_epoch(), reference.steps_per_epoch());
    for (std::int64_t s = 0; s < 2 * loader.steps_per_epoch(); ++s) {
      const TokenBatch& b = loader.next();
      ASSERT_EQ(b.size(), kGlobal / world());
      std::vector<std::int64_t> all(static_cast<std::size_t>(kGlobal));
      MPI_Allgather(b.windows.data(), static_cast<int>(b.size()), MPI_INT64_T, all.data(), static_cast<int>(b.size()),
                    MPI_INT64_T, MPI_COMM_WORLD);
      ASSERT_EQ(all, reference.next().windows) << "step " << s;
      for (std::int64_t i = 0; i < b.size(); ++i) {
        const std::int64_t w = b.windows[static_cast<std::size_t>(i)];
        for (std::int64_t j = 0; j < kBlock; ++j) {
          ASSERT_EQ(b.inputs.data<std::int32_t>()[i * kBlock + j], token_of(w * kBlock + j, kVocab));
          ASSERT_EQ(b.targets.data<std::int32_t>()[i * kBlock + j], token_of(w * kBlock + j + 1, kVocab));
        }
      }
    }
  }
}

TEST_F(TokenDatasetMpi, EveryNodeCopyHoldsAllTokens) {
  // One node per rank pair (or per rank on 2 ranks): the leaders exchange the nodes' parts.
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, world() > 2 ? rank() / 2 : rank(), rank(), &node);
  const auto ds = data::open_token_dataset(MPI_COMM_WORLD, node, spec_of(files_, 8, ReadStrategy::memory));
  const auto want = tokens_from(0, 2600, kVocab);
  std::vector<std::uint16_t> held(want.size());
  std::memcpy(held.data(), ds->resident_tokens(), held.size() * sizeof(std::uint16_t));
  for (std::size_t i = 0; i < want.size(); ++i) ASSERT_EQ(held[i], want[i]) << "rank " << rank() << ", token " << i;
  MPI_Comm_free(&node);
}

TEST_F(TokenDatasetMpi, ABadTokenOneRankReadsFailsEveryRankAlike) {
  auto tokens = tokens_from(0, 2000, kVocab);
  tokens[1990] = 1000;  // in the last rank's shard
  ASSERT_TRUE(on_root([&] { test::write_token_file(path("bad.h5"), tokens); }));
  const std::string msg =
      test::error_of([&] { TokenDataset::open(test::context(), spec_of({path("bad.h5")}, 8, ReadStrategy::memory)); });
  EXPECT_TRUE(same_on_all_ranks(msg)) << "rank " << rank() << ": " << msg;
  EXPECT_EQ(msg, path("bad.h5") + ": dataset 'tokens': token 1000 at index 1990 is >= vocab_size 300");

  ASSERT_TRUE(on_root([&] { test::write_token_file(path("short.h5"), tokens_from(0, 8, kVocab)); }));
  const std::string short_msg = test::error_of(
      [&] { TokenDataset::open(test::context(), spec_of({path("short.h5")}, 8, ReadStrategy::stream)); });
  EXPECT_TRUE(same_on_all_ranks(short_msg)) << short_msg;
  EXPECT_EQ(short_msg, path("short.h5") + ": 8 tokens are fewer than one window of block_size + 1 = 9 tokens");
}

}  // namespace
}  // namespace ringtrain
