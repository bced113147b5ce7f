import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.List;
import java.util.Properties;
import java.util.TreeSet;
import java.util.concurrent.LinkedBlockingQueue;

import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * One real consumer of a consumer group, driven by the broker tier (tests/kafka).
 *
 * Arguments: bootstrap group clientId topics(a,b) assignor(range|cooperative-sticky|...) instanceId(- for none)
 * sessionTimeoutMs maxPollIntervalMs [option=value ...]. Options: protocol=classic|consumer (group.protocol;
 * under "consumer", KIP-848, the session and heartbeat are the broker's and assignor, session and heartbeat
 * arguments are not set), remote=uniform|range (group.remote.assignor), regex=PATTERN (subscribe to a
 * SubscriptionPattern the broker resolves, instead of the topics), hold=1 (start the JVM but join the group
 * only on the command "join": a restart faster than a JVM start).
 * Commands on stdin, one per line: "subscribe a,b", "stall MS" (no poll for MS: exceeds max.poll.interval.ms
 * when longer), "close" (KafkaConsumer#close: LeaveGroup for a dynamic member, a temporary leave for a static
 * one).
 * Events on stdout, one JSON object per line, written from the rebalance listener: what this member saw
 * (generation id, the member epoch under the consumer protocol; member id; partitions revoked/assigned/lost;
 * its whole assignment; wall-clock time). Under the consumer protocol a member's epoch can move without a
 * callback (nothing of its own changed), so after every poll a "state" event reports the epoch and the whole
 * assignment whenever either changed.
 */
public final class GroupMember {
    private static final LinkedBlockingQueue<String> COMMANDS = new LinkedBlockingQueue<>();

    private static String quote(String s) {
        return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
    }

    private static String parts(Collection<TopicPartition> tps) {
        TreeSet<String> sorted = new TreeSet<>();
        for (TopicPartition tp : tps) sorted.add(quote(tp.topic() + ":" + tp.partition()));
        return "[" + String.join(",", sorted) + "]";
    }

    static synchronized void emit(String event, String fields) {
        System.out.println("{\"event\":" + quote(event) + ",\"t\":" + System.currentTimeMillis()
            + (fields.isEmpty() ? "" : "," + fields) + "}");
        System.out.flush();
    }

    public static void main(String[] args) throws Exception {
        if (args.length == 3 && args[0].equals("--create-topics")) {
            createTopics(args[1], args[2]);
            return;
        }
        if (args.length < 8) {
            System.err.println("usage: GroupMember bootstrap group clientId topics assignor instanceId|- sessionMs maxPollMs"
                + " [protocol=classic|consumer] [remote=ASSIGNOR] [regex=PATTERN] [hold=1]");
            System.exit(2);
        }
        java.util.Map<String, String> options = new java.util.HashMap<>();
        for (int i = 8; i < args.length; i++) {
            String[] kv = args[i].split("=", 2);
            options.put(kv[0], kv[1]);
        }
        String protocol = options.getOrDefault("protocol", "classic");
        String group = args[1];
        Properties p = new Properties();
        p.put("bootstrap.servers", args[0]);
        p.put("group.id", group);
        p.put("client.id", args[2]);
        p.put("group.protocol", protocol);
        if (protocol.equals("classic")) {
            p.put("partition.assignment.strategy", assignorClass(args[4]));
            p.put("session.timeout.ms", args[6]);
            p.put("heartbeat.interval.ms", String.valueOf(Math.max(100, Integer.parseInt(args[6]) / 5)));
        } else if (options.containsKey("remote")) {
            p.put("group.remote.assignor", options.get("remote"));
        }
        if (!args[5].equals("-")) p.put("group.instance.id", args[5]);
        p.put("max.poll.interval.ms", args[7]);
        p.put("enable.auto.commit", "true");
        p.put("auto.commit.interval.ms", "500");
        p.put("auto.offset.reset", "earliest");
        p.put("key.deserializer", ByteArrayDeserializer.class.getName());
        p.put("value.deserializer", ByteArrayDeserializer.class.getName());

        Thread stdin = new Thread(() -> {
            try (java.io.BufferedReader in = new java.io.BufferedReader(new java.io.InputStreamReader(System.in))) {
                String line;
                while ((line = in.readLine()) != null) COMMANDS.add(line.trim());
            } catch (java.io.IOException e) {
                // stdin closed: no more commands
            }
            COMMANDS.add("close");
        }, "stdin");
        stdin.setDaemon(true);
        stdin.start();

        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(p)) {
            ConsumerRebalanceListener listener = new ConsumerRebalanceListener() {
                private String who() {
                    ConsumerGroupMetadata m = consumer.groupMetadata();
                    return "\"generation\":" + m.generationId() + ",\"member_id\":" + quote(m.memberId());
                }

                @Override
                public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
                    emit("revoked", who() + ",\"partitions\":" + parts(partitions));
                }

                @Override
                public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
                    emit("assigned", who() + ",\"partitions\":" + parts(partitions)
                        + ",\"assignment\":" + parts(consumer.assignment()));
                }

                @Override
                public void onPartitionsLost(Collection<TopicPartition> partitions) {
                    emit("lost", who() + ",\"partitions\":" + parts(partitions));
                }
            };
            if (options.containsKey("hold")) {  // started ahead, joins on "join" (a quick static restart)
                emit("holding", "\"pid\":" + ProcessHandle.current().pid());
                String first;
                while (!(first = COMMANDS.take()).equals("join")) {
                    if (first.equals("close")) {  // closed before it ever joined
                        emit("closed", "");
                        return;
                    }
                }
            }
            if (options.containsKey("regex")) {
                consumer.subscribe(new org.apache.kafka.clients.consumer.SubscriptionPattern(options.get("regex")), listener);
            } else {
                consumer.subscribe(Arrays.asList(args[3].split(",")), listener);
            }
            emit("started", "\"client_id\":" + quote(args[2]) + ",\"pid\":" + ProcessHandle.current().pid());
            String lastState = "";
            while (true) {
                String cmd = COMMANDS.poll();
                if (cmd != null && !cmd.isEmpty()) {
                    String[] words = cmd.split("\\s+", 2);
                    if (words[0].equals("close")) {
                        emit("closing", "");
                        break;
                    } else if (words[0].equals("subscribe")) {
                        List<String> topics = new ArrayList<>(Arrays.asList(words[1].split(",")));
                        consumer.subscribe(topics, listener);
                        emit("subscribed", "\"topics\":" + quote(words[1]));
                    } else if (words[0].equals("stall")) {
                        emit("stall_begin", "");
                        Thread.sleep(Long.parseLong(words[1]));
                        emit("stall_end", "");
                    } else {
                        emit("error", "\"message\":" + quote("unknown command " + cmd));
                    }
                }
                consumer.poll(Duration.ofMillis(100));
                ConsumerGroupMetadata meta = consumer.groupMetadata();
                String state = "\"generation\":" + meta.generationId() + ",\"member_id\":" + quote(meta.memberId())
                    + ",\"assignment\":" + parts(consumer.assignment());
                if (protocol.equals("consumer") && !state.equals(lastState)
                        && meta.generationId() == consumer.groupMetadata().generationId()) {
                    emit("state", state);
                    lastState = state;
                }
            }
        }
        emit("closed", "");
    }

    /** "--create-topics bootstrap name:partitions,...": creates the topics (replication factor 1) and waits. */
    private static void createTopics(String bootstrap, String spec) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        List<org.apache.kafka.clients.admin.NewTopic> topics = new ArrayList<>();
        for (String t : spec.split(",")) {
            String[] nameAndCount = t.split(":");
            topics.add(new org.apache.kafka.clients.admin.NewTopic(nameAndCount[0], Integer.parseInt(nameAndCount[1]), (short) 1));
        }
        try (org.apache.kafka.clients.admin.Admin admin = org.apache.kafka.clients.admin.Admin.create(p)) {
            admin.createTopics(topics).all().get(60, java.util.concurrent.TimeUnit.SECONDS);
        }
        emit("topics_created", "\"topics\":" + quote(spec));
    }

    private static String assignorClass(String name) {
        switch (name) {
            case "range": return "org.apache.kafka.clients.consumer.RangeAssignor";
            case "roundrobin": return "org.apache.kafka.clients.consumer.RoundRobinAssignor";
            case "sticky": return "org.apache.kafka.clients.consumer.StickyAssignor";
            case "cooperative-sticky": return "org.apache.kafka.clients.consumer.CooperativeStickyAssignor";
            default: throw new IllegalArgumentException("unknown assignor " + name);
        }
    }
}
