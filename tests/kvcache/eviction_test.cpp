#include "kvcache/eviction.h"

#include <gtest/gtest.h>

#include <vector>

namespace pagoda::kvcache {
namespace {

std::vector<int32_t> drain(EvictionPolicy& policy) {
  std::vector<int32_t> order;
  while (auto victim = policy.victim()) {
    order.push_back(*victim);
    policy.remove(*victim);
  }
  return order;
}

TEST(Eviction, NamesRoundTrip) {
  for (auto kind : {EvictionPolicyKind::kLru, EvictionPolicyKind::kLfu, EvictionPolicyKind::kPriority}) {
    EXPECT_EQ(eviction_policy_from_name(eviction_policy_name(kind)), kind);
  }
  EXPECT_FALSE(eviction_policy_from_name("fifo").has_value());
}

TEST(Eviction, LruOrdersByLastAccess) {
  auto policy = make_eviction_policy(EvictionPolicyKind::kLru, 8);
  policy->add(3, {30, 1, 0});
  policy->add(5, {10, 9, 0});
  policy->add(1, {20, 1, 9});
  policy->add(7, {40, 1, 0});
  policy->remove(7);
  EXPECT_EQ(policy->size(), 3);
  EXPECT_FALSE(policy->contains(7));
  EXPECT_EQ(drain(*policy), (std::vector<int32_t>{5, 1, 3}));
  EXPECT_FALSE(policy->victim().has_value());
}

TEST(Eviction, LfuOrdersByAccessesThenRecency) {
  auto policy = make_eviction_policy(EvictionPolicyKind::kLfu, 8);
  policy->add(0, {1, 5, 0});
  policy->add(1, {2, 1, 0});
  policy->add(2, {3, 1, 0});
  policy->add(3, {4, 2, 0});
  EXPECT_EQ(drain(*policy), (std::vector<int32_t>{1, 2, 3, 0}));
}

TEST(Eviction, PriorityOrdersByPriorityThenRecency) {
  auto policy = make_eviction_policy(EvictionPolicyKind::kPriority, 8);
  policy->add(0, {1, 1, 5});
  policy->add(1, {2, 1, -3});
  policy->add(2, {3, 1, 0});
  policy->add(3, {0, 1, 0});
  policy->add(4, {9, 1, -3});
  EXPECT_EQ(drain(*policy), (std::vector<int32_t>{1, 4, 3, 2, 0}));
}

TEST(Eviction, HeapStaysOrderedUnderRandomRemovals) {
  auto policy = make_eviction_policy(EvictionPolicyKind::kLru, 64);
  for (int32_t b = 0; b < 64; ++b) policy->add(b, {static_cast<uint64_t>((b * 37) % 64), 1, 0});
  for (int32_t b = 0; b < 64; b += 3) policy->remove(b);
  uint64_t last = 0;
  for (int32_t b : drain(*policy)) {
    const uint64_t t = static_cast<uint64_t>((b * 37) % 64);
    EXPECT_NE(b % 3, 0);
    EXPECT_GE(t, last);
    last = t;
  }
}

}  // namespace
}  // namespace pagoda::kvcache
