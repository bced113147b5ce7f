import java.io.PrintWriter;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.function.Predicate;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.ShareGroupDescription;
import org.apache.kafka.clients.admin.ShareMemberDescription;
import org.apache.kafka.clients.admin.StreamsGroupDescription;
import org.apache.kafka.clients.admin.StreamsGroupMemberAssignment;
import org.apache.kafka.clients.admin.StreamsGroupMemberDescription;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.GroupState;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.ThreadMetadata;
import org.apache.kafka.streams.TaskMetadata;
import org.apache.kafka.streams.kstream.Produced;

/**
 * A share group (KafkaShareConsumer, KIP-932) and a streams group (Kafka Streams with
 * group.protocol=streams, KIP-1071) on a running Kafka 4.4 broker, then the broker's
 * __consumer_offsets dumped. Writes to OUT_DIR:
 *   records.jsonl  one line per __consumer_offsets record: partition, offset, timestamp, key/value hex
 *   truth.json     at each quiet point: the broker's description of the group (DescribeShareGroups /
 *                  DescribeStreamsGroups: group epoch, each member's epoch and assignment) and, for the
 *                  streams group, each application's own view of its tasks (KafkaStreams#metadataForLocalThreads)
 * Usage: java ShareStreamsScenario BOOTSTRAP OUT_DIR
 */
public class ShareStreamsScenario {
    static final String SHARE_GROUP = "share-audit";
    static final String STREAMS_APP = "streams-audit";
    static String bootstrap;
    static Admin admin;
    static final List<String> truth = new ArrayList<>();

    public static void main(String[] args) {
        int rc = 0;
        try {
            run(args);
        } catch (Throwable t) {
            t.printStackTrace();
            rc = 1;
        }
        System.exit(rc);  // a share consumer's or a streams thread never keeps the JVM alive
    }

    static void run(String[] args) throws Exception {
        bootstrap = args[0];
        Path out = Path.of(args[1]);
        Files.createDirectories(out);
        Properties ap = new Properties();
        ap.put("bootstrap.servers", bootstrap);
        admin = Admin.create(ap);
        admin.createTopics(List.of(new NewTopic("share-in", 3, (short) 1), new NewTopic("streams-in", 2, (short) 1),
            new NewTopic("streams-out", 2, (short) 1))).all().get();
        produce("share-in", 30);
        produce("streams-in", 20);

        // share group: s1 joins, s2 joins, s1 leaves, s2 leaves
        ShareMember s1 = new ShareMember("share-c1");
        shareQuiet("s1 joined", 1);
        ShareMember s2 = new ShareMember("share-c2");
        shareQuiet("s2 joined", 2);
        s1.stop();
        shareQuiet("s1 left", 1);
        s2.stop();
        shareQuiet("s2 left", 0);

        // streams group: a joins, b joins, a leaves, b leaves
        KafkaStreams a = streams("a", out);
        streamsQuiet("a joined", 1, List.of(a));
        KafkaStreams b = streams("b", out);
        streamsQuiet("b joined", 2, List.of(a, b));
        a.close(Duration.ofSeconds(30));
        streamsQuiet("a left", 1, List.of(b));
        b.close(Duration.ofSeconds(30));
        streamsQuiet("b left", 0, List.of());

        dump(out.resolve("records.jsonl"));
        Files.writeString(out.resolve("truth.json"), "[\n" + String.join(",\n", truth) + "\n]\n");
        admin.close();
    }

    static void produce(String topic, int n) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            for (int i = 0; i < n; i++) producer.send(new ProducerRecord<>(topic, "k" + i, "v" + i)).get();
        }
    }

    /** A KafkaShareConsumer polling on its own thread until stopped (then closed: a clean leave). */
    static final class ShareMember {
        final AtomicBoolean running = new AtomicBoolean(true);
        final Thread thread;

        ShareMember(String clientId) {
            Properties p = new Properties();
            p.put("bootstrap.servers", bootstrap);
            p.put("group.id", SHARE_GROUP);
            p.put("client.id", clientId);
            p.put("key.deserializer", StringDeserializer.class.getName());
            p.put("value.deserializer", StringDeserializer.class.getName());
            thread = new Thread(() -> {
                try (KafkaShareConsumer<String, String> c = new KafkaShareConsumer<>(p)) {
                    c.subscribe(List.of("share-in"));
                    while (running.get()) c.poll(Duration.ofMillis(200));
                }
            }, clientId);
            thread.setDaemon(true);
            thread.start();
        }

        void stop() throws InterruptedException {
            running.set(false);
            thread.join(60_000);
        }
    }

    static KafkaStreams streams(String name, Path out) {
        StreamsBuilder builder = new StreamsBuilder();
        builder.<String, String>stream("streams-in").groupByKey().count().toStream()
            .to("streams-out", Produced.with(Serdes.String(), Serdes.Long()));
        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, STREAMS_APP);
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(StreamsConfig.GROUP_PROTOCOL_CONFIG, "streams");
        p.put(StreamsConfig.CLIENT_ID_CONFIG, "streams-" + name);
        p.put(StreamsConfig.STATE_DIR_CONFIG, out.resolve("state-" + name).toString());
        p.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class.getName());
        p.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class.getName());
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 1000);
        KafkaStreams ks = new KafkaStreams(builder.build(), p);
        ks.start();
        return ks;
    }

    static void waitFor(String what, java.util.concurrent.Callable<Boolean> done) throws Exception {
        long deadline = System.currentTimeMillis() + 120_000;
        int quiet = 0;
        while (quiet < 3) {  // three checks in a row, a second apart
            if (System.currentTimeMillis() > deadline) throw new IllegalStateException("not settled: " + what);
            boolean ok;
            try {
                ok = done.call();
            } catch (java.util.concurrent.ExecutionException e) {  // the group is not there yet
                ok = false;
            }
            quiet = ok ? quiet + 1 : 0;
            Thread.sleep(1000);
        }
    }

    static void shareQuiet(String step, int members) throws Exception {
        waitFor(step, () -> {
            ShareGroupDescription d = admin.describeShareGroups(List.of(SHARE_GROUP)).all().get().get(SHARE_GROUP);
            if (d.members().size() != members) return false;
            if (members == 0) return d.groupState() == GroupState.EMPTY;
            return d.groupState() == GroupState.STABLE && d.targetAssignmentEpoch() == d.groupEpoch()
                && d.members().stream().allMatch(m -> m.memberEpoch() == d.groupEpoch());
        });
        long at = System.currentTimeMillis();
        ShareGroupDescription d = admin.describeShareGroups(List.of(SHARE_GROUP)).all().get().get(SHARE_GROUP);
        List<String> ms = new ArrayList<>();
        for (ShareMemberDescription m : d.members()) {
            TreeSet<String> tps = new TreeSet<>();
            for (TopicPartition tp : m.assignment().topicPartitions()) tps.add(q(tp.topic() + ":" + tp.partition()));
            ms.add("{\"member_id\":" + q(m.consumerId()) + ",\"client_id\":" + q(m.clientId()) + ",\"member_epoch\":"
                + m.memberEpoch() + ",\"assigned\":[" + String.join(",", tps) + "]}");
        }
        truth.add("{\"group\":" + q(SHARE_GROUP) + ",\"type\":\"share\",\"step\":" + q(step) + ",\"at\":" + at + ",\"group_epoch\":"
            + d.groupEpoch() + ",\"assignment_epoch\":" + d.targetAssignmentEpoch() + ",\"state\":"
            + q(d.groupState().toString()) + ",\"members\":[" + String.join(",", ms) + "]}");
    }

    static void streamsQuiet(String step, int members, List<KafkaStreams> apps) throws Exception {
        waitFor(step, () -> {
            StreamsGroupDescription d = admin.describeStreamsGroups(List.of(STREAMS_APP)).all().get().get(STREAMS_APP);
            if (d.members().size() != members) return false;
            if (!apps.stream().allMatch(a -> a.state() == KafkaStreams.State.RUNNING)) return false;
            if (members == 0) return d.groupState() == GroupState.EMPTY;
            return d.groupState() == GroupState.STABLE && d.targetAssignmentEpoch() == d.groupEpoch()
                && d.members().stream().allMatch(m -> m.memberEpoch() == d.groupEpoch());
        });
        long at = System.currentTimeMillis();
        StreamsGroupDescription d = admin.describeStreamsGroups(List.of(STREAMS_APP)).all().get().get(STREAMS_APP);
        List<String> ms = new ArrayList<>();
        for (StreamsGroupMemberDescription m : d.members()) {
            ms.add("{\"member_id\":" + q(m.memberId()) + ",\"client_id\":" + q(m.clientId()) + ",\"member_epoch\":"
                + m.memberEpoch() + ",\"assigned\":" + tasks(m.assignment()) + "}");
        }
        List<String> clients = new ArrayList<>();
        for (KafkaStreams app : apps) {
            for (ThreadMetadata t : app.metadataForLocalThreads()) {
                TreeSet<String> ts = new TreeSet<>();
                for (TaskMetadata tm : t.activeTasks()) ts.add(q("active:" + tm.taskId().subtopology() + ":" + tm.taskId().partition()));
                for (TaskMetadata tm : t.standbyTasks()) ts.add(q("standby:" + tm.taskId().subtopology() + ":" + tm.taskId().partition()));
                clients.add("{\"thread\":" + q(t.threadName()) + ",\"consumer_client_id\":" + q(t.consumerClientId())
                    + ",\"tasks\":[" + String.join(",", ts) + "]}");
            }
        }
        truth.add("{\"group\":" + q(STREAMS_APP) + ",\"type\":\"streams\",\"step\":" + q(step) + ",\"at\":" + at + ",\"group_epoch\":"
            + d.groupEpoch() + ",\"assignment_epoch\":" + d.targetAssignmentEpoch() + ",\"state\":"
            + q(d.groupState().toString()) + ",\"members\":[" + String.join(",", ms) + "],\"clients\":["
            + String.join(",", clients) + "]}");
    }

    static String tasks(StreamsGroupMemberAssignment a) {
        TreeSet<String> ts = new TreeSet<>();
        Map<String, List<StreamsGroupMemberAssignment.TaskIds>> kinds = new TreeMap<>(Map.of(
            "active", a.activeTasks(), "standby", a.standbyTasks(), "warmup", a.warmupTasks()));
        kinds.forEach((kind, list) -> {
            for (StreamsGroupMemberAssignment.TaskIds t : list)
                for (int p : t.partitions()) ts.add(q(kind + ":" + t.subtopologyId() + ":" + p));
        });
        return "[" + String.join(",", ts) + "]";
    }

    static void dump(Path file) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("key.deserializer", ByteArrayDeserializer.class.getName());
        p.put("value.deserializer", ByteArrayDeserializer.class.getName());
        p.put("enable.auto.commit", "false");
        p.put("exclude.internal.topics", "false");
        HexFormat hex = HexFormat.of();
        try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p);
             PrintWriter w = new PrintWriter(Files.newBufferedWriter(file))) {
            List<TopicPartition> tps = new ArrayList<>();
            for (PartitionInfo pi : c.partitionsFor("__consumer_offsets")) tps.add(new TopicPartition(pi.topic(), pi.partition()));
            c.assign(tps);
            c.seekToBeginning(tps);
            Map<TopicPartition, Long> ends = c.endOffsets(tps);
            Predicate<TopicPartition> behind = tp -> c.position(tp) < ends.get(tp);
            while (tps.stream().anyMatch(behind)) {
                for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(500))) {
                    w.println("{\"partition\":" + r.partition() + ",\"offset\":" + r.offset() + ",\"timestamp\":"
                        + r.timestamp() + ",\"key\":" + q(hex.formatHex(r.key())) + ",\"value\":"
                        + (r.value() == null ? "null" : q(hex.formatHex(r.value()))) + "}");
                }
            }
        }
    }

    static String q(String s) {
        return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
    }
}
