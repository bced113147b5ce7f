import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.HexFormat;
import org.apache.kafka.common.protocol.ApiMessage;
import org.apache.kafka.common.protocol.MessageUtil;
import org.apache.kafka.coordinator.common.runtime.CoordinatorRecord;
import org.apache.kafka.coordinator.group.GroupCoordinatorRecordSerde;
import org.apache.kafka.coordinator.group.generated.CoordinatorRecordJsonConverters;
import org.apache.kafka.coordinator.group.generated.CoordinatorRecordType;

/**
 * Kafka's own group-record serde as a filter. Each input line is a JSON object
 * {"record_type", "key", "value_version", "value"} in Kafka's JSON form (value null: a tombstone),
 * or {"record_type", "value_version", "defaults": true} for the type's key and value as Kafka's
 * CoordinatorRecordType#newRecordKey/newRecordValue build them (every field at its default); each
 * output line adds "key_hex" and "value_hex" (the bytes Kafka's generated classes write, via
 * GroupCoordinatorRecordSerde) and "kafka_key" / "kafka_value" (what the serde reads back from
 * those bytes, written by Kafka's JSON converters).
 */
public final class GroupRecordSerde {
    public static void main(String[] args) throws Exception {
        ObjectMapper mapper = new ObjectMapper();
        GroupCoordinatorRecordSerde serde = new GroupCoordinatorRecordSerde();
        HexFormat hex = HexFormat.of();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) continue;
            ObjectNode node = (ObjectNode) mapper.readTree(line);
            short type = (short) node.get("record_type").asInt();
            short version = (short) node.get("value_version").asInt();
            boolean defaults = node.has("defaults");
            ApiMessage key = defaults ? CoordinatorRecordType.fromId(type).newRecordKey()
                : CoordinatorRecordJsonConverters.readRecordKeyFromJson(node.get("key"), type);
            byte[] keyBytes = MessageUtil.toCoordinatorTypePrefixedBytes(key);
            byte[] valueBytes = null;
            if (defaults || !node.get("value").isNull()) {
                ApiMessage value = defaults ? CoordinatorRecordType.fromId(type).newRecordValue()
                    : CoordinatorRecordJsonConverters.readRecordValueFromJson(node.get("value"), type, version);
                valueBytes = MessageUtil.toVersionPrefixedBytes(version, value);
            }
            CoordinatorRecord back = serde.deserialize(ByteBuffer.wrap(keyBytes),
                valueBytes == null ? null : ByteBuffer.wrap(valueBytes));
            node.put("key_hex", hex.formatHex(keyBytes));
            node.put("value_hex", valueBytes == null ? null : hex.formatHex(valueBytes));
            node.set("kafka_key", CoordinatorRecordJsonConverters.writeRecordKeyAsJson(back.key()));
            JsonNode kafkaValue = back.value() == null ? null
                : CoordinatorRecordJsonConverters.writeRecordValueAsJson(back.value().message(), back.value().version());
            node.set("kafka_value", kafkaValue);
            System.out.println(mapper.writeValueAsString(node));
        }
    }
}
