// Subscribing to, unsubscribing from and running eviction callbacks.
#include "cache/callback_registry.hpp"

#include <algorithm>

#include "util/log.hpp"

namespace unicache::detail {
namespace {

// Lets a callback unregister itself: the callbacks this thread is running.
thread_local std::vector<const void*> running_callbacks;

}  // namespace

eviction_subscription callback_registry::add(owner_id owner, eviction_callback callback) {
  if (!callback) throw cache_error("unicache: add_eviction_callback needs a callable callback");
  auto s = std::make_shared<slot>();
  s->callback = std::move(callback);
  mutex_lock lock(&mu_);
  s->id = ++last_id_;
  slots_[owner].push_back(s);
  return {owner, s->id};
}

bool callback_registry::remove(const eviction_subscription& subscription) {
  mutex_lock lock(&mu_);
  auto it = slots_.find(subscription.owner);
  if (it == slots_.end()) return false;
  auto& list = it->second;
  const auto found = std::find_if(list.begin(), list.end(), [&](const auto& s) {
    return subscription.id != 0 && s->id == subscription.id;
  });
  if (found == list.end()) return false;
  std::shared_ptr<slot> s = *found;
  list.erase(found);
  if (list.empty()) slots_.erase(it);
  s->id = 0;  // a run that copied the list before this skips it
  // Wait for other threads' calls; calls on this thread (unsubscribing from
  // inside the callback) are allowed to stay.
  const int mine = static_cast<int>(std::count(running_callbacks.begin(), running_callbacks.end(), s.get()));
  mu_.wait(finished_, [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return s->running <= mine; });
  return true;
}

void callback_registry::run(const eviction_event& event) {
  std::vector<std::shared_ptr<slot>> list;
  {
    mutex_lock lock(&mu_);
    auto it = slots_.find(event.owner);
    if (it == slots_.end()) return;
    list = it->second;
  }
  for (const std::shared_ptr<slot>& s : list) {
    {
      mutex_lock lock(&mu_);
      if (s->id == 0) continue;  // removed since the copy
      ++s->running;
    }
    running_callbacks.push_back(s.get());
    try {
      s->callback(event);
    } catch (...) {
      warn("an eviction callback threw; the exception was dropped");
    }
    running_callbacks.pop_back();
    mutex_lock lock(&mu_);
    --s->running;
    finished_.notify_all();
  }
}

}  // namespace unicache::detail
